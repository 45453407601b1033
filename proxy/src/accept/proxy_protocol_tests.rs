use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn v1_lines() {
    let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 5000 80\r\nGET /";
    assert_eq!(
        parse(line),
        Parsed::Header {
            version: 1,
            len: 43,
            addresses: Addresses::Proxied {
                source: addr("192.0.2.1:5000"),
                destination: addr("198.51.100.2:80")
            }
        }
    );
    assert_eq!(
        parse(b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"),
        Parsed::Header {
            version: 1,
            len: 40,
            addresses: Addresses::Proxied {
                source: addr("[2001:db8::1]:1"),
                destination: addr("[2001:db8::2]:2")
            }
        }
    );
    assert!(matches!(
        parse(b"PROXY UNKNOWN\r\n"),
        Parsed::Header {
            addresses: Addresses::Own,
            ..
        }
    ));
    assert_eq!(parse(b"PROXY TCP4 192.0.2.1"), Parsed::More);
    assert_eq!(parse(b"PRO"), Parsed::More);
    // A v6 address in a TCP4 line, a bad port, a multicast source.
    assert_eq!(parse(b"PROXY TCP4 ::1 ::2 1 2\r\n"), Parsed::Error(1));
    assert_eq!(
        parse(b"PROXY TCP4 192.0.2.1 192.0.2.2 1 70000\r\n"),
        Parsed::Error(1)
    );
    assert_eq!(
        parse(b"PROXY TCP4 224.0.0.1 192.0.2.2 1 2\r\n"),
        Parsed::Error(1)
    );
    assert_eq!(parse(&[b'P'; 120]), Parsed::NotFound);
    let long = [b"PROXY ".as_slice(), &[b'x'; 110]].concat();
    assert_eq!(parse(&long), Parsed::Error(1));
    assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Parsed::NotFound);
}

fn v2(cmd: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut v = V2_SIGNATURE.to_vec();
    v.push(0x20 | cmd);
    v.push(family);
    v.extend_from_slice(&(body.len() as u16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn v2_headers() {
    let body = [192, 0, 2, 1, 198, 51, 100, 2, 0x13, 0x88, 0, 80];
    let h = v2(1, 0x11, &body);
    assert_eq!(
        parse(&h),
        Parsed::Header {
            version: 2,
            len: 28,
            addresses: Addresses::Proxied {
                source: addr("192.0.2.1:5000"),
                destination: addr("198.51.100.2:80")
            }
        }
    );
    assert_eq!(parse(&h[..20]), Parsed::More);
    // TLVs after the addresses are skipped with them.
    let with_tlv = v2(1, 0x11, &[&body[..], &[1, 0, 2, b'h', b'2']].concat());
    assert!(matches!(parse(&with_tlv), Parsed::Header { len: 33, .. }));
    assert!(matches!(
        parse(&v2(0, 0, &[])),
        Parsed::Header {
            addresses: Addresses::Own,
            ..
        }
    ));
    // A Unix address block, a bad command, a short address block.
    assert_eq!(parse(&v2(1, 0x31, &[0; 216])), Parsed::Error(2));
    assert_eq!(parse(&v2(3, 0x11, &body)), Parsed::Error(2));
    assert_eq!(parse(&v2(1, 0x11, &body[..8])), Parsed::Error(2));
}
