//! JA3 and JA4 fingerprints of a ClientHello, as Envoy's `tls_inspector`
//! computes them (`enable_ja3_fingerprinting`, `enable_ja4_fingerprinting`):
//! from the hello's bytes as the client sent them, GREASE values (RFC 8701)
//! left out where Envoy leaves them out.

/// The fingerprints a listener asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprints {
    /// The JA3 hash (32 hex digits).
    pub ja3: Option<String>,
    /// The JA4 fingerprint (`t13d1516h2_8daaf6152771_b186095e22b6`).
    pub ja4: Option<String>,
}

impl Fingerprints {
    /// The fingerprints of the ClientHello in `records` (TLS records as read
    /// off the socket), those asked for; `None` when the bytes do not hold a
    /// whole, well-formed ClientHello.
    pub fn of(records: &[u8], ja3: bool, ja4: bool) -> Option<Fingerprints> {
        let body = handshake_body(records)?;
        let hello = Hello::parse(&body)?;
        Some(Fingerprints {
            ja3: ja3.then(|| hello.ja3()),
            ja4: ja4.then(|| hello.ja4()),
        })
    }
}

/// Envoy's GREASE test: the sixteen RFC 8701 values.
fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && (v >> 8) == (v & 0xff)
}

/// The ClientHello message's body, from the handshake records it spans.
fn handshake_body(mut records: &[u8]) -> Option<Vec<u8>> {
    let mut handshake = Vec::new();
    while records.len() >= 5 && records[0] == 0x16 {
        let len = usize::from(u16::from_be_bytes([records[3], records[4]]));
        let fragment = records.get(5..5 + len)?;
        handshake.extend_from_slice(fragment);
        records = &records[5 + len..];
        if handshake.len() >= 4 {
            let want = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if handshake.len() >= 4 + want {
                // Message type 1: ClientHello.
                return (handshake[0] == 1).then(|| handshake[4..4 + want].to_vec());
            }
        }
    }
    None
}

/// A reader over a byte slice that fails (instead of panicking) past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

fn u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
}

/// What the fingerprints read of a ClientHello.
struct Hello<'a> {
    version: u16,
    ciphers: &'a [u8],
    /// (type, data), in the order sent.
    extensions: Vec<(u16, &'a [u8])>,
}

const SERVER_NAME: u16 = 0;
const SUPPORTED_GROUPS: u16 = 10;
const EC_POINT_FORMATS: u16 = 11;
const SIGNATURE_ALGORITHMS: u16 = 13;
const ALPN: u16 = 16;
const SUPPORTED_VERSIONS: u16 = 43;

impl<'a> Hello<'a> {
    fn parse(body: &'a [u8]) -> Option<Hello<'a>> {
        let mut r = Reader(body);
        let version = r.u16()?;
        r.take(32)?;
        r.vec8()?;
        let ciphers = r.vec16()?;
        r.vec8()?;
        let mut extensions = Vec::new();
        if !r.0.is_empty() {
            let mut exts = Reader(r.vec16()?);
            while !exts.0.is_empty() {
                let t = exts.u16()?;
                extensions.push((t, exts.vec16()?));
            }
        }
        Some(Hello {
            version,
            ciphers,
            extensions,
        })
    }

    fn extension(&self, t: u16) -> Option<&'a [u8]> {
        self.extensions
            .iter()
            .find(|(x, _)| *x == t)
            .map(|(_, d)| *d)
    }

    /// `version,ciphers,extensions,groups,point formats` (decimal, `-`
    /// joined), MD5 in hex. As Envoy: GREASE ciphers and extensions left out,
    /// groups and point formats kept as sent.
    fn ja3(&self) -> String {
        use md5::Digest as _;
        let join = |it: &mut dyn Iterator<Item = u16>| {
            it.map(|v| v.to_string()).collect::<Vec<_>>().join("-")
        };
        let groups = self
            .extension(SUPPORTED_GROUPS)
            .and_then(|d| Reader(d).vec16())
            .unwrap_or_default();
        let formats = self
            .extension(EC_POINT_FORMATS)
            .and_then(|d| Reader(d).vec8())
            .unwrap_or_default();
        let text = format!(
            "{},{},{},{},{}",
            self.version,
            join(&mut u16s(self.ciphers).filter(|c| !is_grease(*c))),
            join(
                &mut self
                    .extensions
                    .iter()
                    .map(|(t, _)| *t)
                    .filter(|t| !is_grease(*t))
            ),
            join(&mut u16s(groups)),
            formats
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join("-"),
        );
        hex(&md5::Md5::digest(text.as_bytes()))
    }

    /// `t<version><d|i><ciphers><extensions><alpn>_<cipher hash>_<extension hash>`.
    fn ja4(&self) -> String {
        let ciphers: Vec<u16> = u16s(self.ciphers).filter(|c| !is_grease(*c)).collect();
        let n_ext = self
            .extensions
            .iter()
            .filter(|(t, _)| !is_grease(*t))
            .count();
        format!(
            "t{}{}{:02}{:02}{}_{}_{}",
            self.ja4_version(),
            if self.extension(SERVER_NAME).is_some() {
                "d"
            } else {
                "i"
            },
            ciphers.len().min(99),
            n_ext.min(99),
            self.ja4_alpn(),
            cipher_hash(ciphers),
            self.extension_hash(),
        )
    }

    fn ja4_version(&self) -> &'static str {
        let highest = match self.extension(SUPPORTED_VERSIONS).map(|d| Reader(d).vec8()) {
            // Present but unreadable: Envoy gives up on the version.
            Some(None) => return "00",
            Some(Some(v)) => u16s(v).filter(|v| !is_grease(*v)).max().unwrap_or(0),
            None => 0,
        };
        match if highest != 0 { highest } else { self.version } {
            0x0304 => "13",
            0x0303 => "12",
            0x0302 => "11",
            0x0301 => "10",
            _ => "00",
        }
    }

    /// The first ALPN protocol's first and last characters; two hex digits
    /// (high nibble of the first byte, low nibble of the last) when either is
    /// not alphanumeric (Envoy 1.40's `ja4_alpn_hex_conversion_fix`, on by
    /// default); `00` without ALPN.
    fn ja4_alpn(&self) -> String {
        let proto = self.extension(ALPN).and_then(|d| {
            let mut r = Reader(d);
            r.u16()?;
            r.vec8()
        });
        let Some((Some(&first), Some(&last))) = proto.map(|p| (p.first(), p.last())) else {
            return "00".into();
        };
        if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
            format!("{}{}", first as char, last as char)
        } else {
            format!("{:x}{:x}", first >> 4, last & 0x0f)
        }
    }

    /// Sorted non-GREASE extensions but SNI and ALPN, then `_` and the
    /// signature algorithms as sent; SHA-256, 12 hex digits.
    fn extension_hash(&self) -> String {
        let mut exts: Vec<u16> = self
            .extensions
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| !is_grease(*t) && *t != SERVER_NAME && *t != ALPN)
            .collect();
        if exts.is_empty() {
            return "0".repeat(12);
        }
        exts.sort_unstable();
        let mut text = hex_list(&exts);
        let sig_algs: Vec<u16> = self
            .extension(SIGNATURE_ALGORITHMS)
            // Envoy skips the list's length and reads every pair after it.
            .and_then(|d| d.get(2..))
            .map(|d| u16s(d).collect())
            .unwrap_or_default();
        if !sig_algs.is_empty() {
            text.push('_');
            text.push_str(&hex_list(&sig_algs));
        }
        sha256_12(&text)
    }
}

fn cipher_hash(mut ciphers: Vec<u16>) -> String {
    if ciphers.is_empty() {
        return "0".repeat(12);
    }
    ciphers.sort_unstable();
    sha256_12(&hex_list(&ciphers))
}

fn hex_list(v: &[u16]) -> String {
    v.iter()
        .map(|x| format!("{x:04x}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn sha256_12(text: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    hex(&d.as_ref()[..6])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with GREASE values, SNI, ALPN `h2`, three groups, one
    /// point format and two signature algorithms, in one record.
    fn hello() -> Vec<u8> {
        let mut ext = Vec::new();
        let mut push = |t: u16, data: &[u8]| {
            ext.extend_from_slice(&t.to_be_bytes());
            ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
            ext.extend_from_slice(data);
        };
        push(0x1a1a, &[]);
        push(0, &[0, 6, 0, 0, 3, b'a', b'.', b'b']);
        push(10, &[0, 6, 0x2a, 0x2a, 0, 29, 0, 23]);
        push(11, &[1, 0]);
        push(13, &[0, 4, 4, 3, 8, 4]);
        push(16, &[0, 3, 2, b'h', b'2']);
        push(43, &[4, 0x3a, 0x3a, 3, 4]);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 6, 0x0a, 0x0a, 0x13, 0x01, 0xc0, 0x2f]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8];
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn ja3_and_ja4_follow_envoys_rules() {
        let f = Fingerprints::of(&hello(), true, true).expect("a hello");
        // GREASE cipher and extension out, the GREASE group kept (as Envoy).
        let text = "771,4865-49199,0-10-11-13-16-43,10794-29-23,0";
        use md5::Digest as _;
        assert_eq!(
            f.ja3.as_deref(),
            Some(hex(&md5::Md5::digest(text)).as_str())
        );
        let ja4 = f.ja4.expect("ja4");
        assert!(ja4.starts_with("t13d0206h2_"), "{ja4}");
        assert_eq!(ja4.split('_').nth(1), Some(sha256_12("1301,c02f").as_str()));
        assert_eq!(
            ja4.split('_').nth(2),
            Some(sha256_12("000a,000b,000d,002b_0403,0804").as_str())
        );
    }

    #[test]
    fn a_hello_split_across_records_counts_and_garbage_does_not() {
        let one = hello();
        let hs = &one[5..];
        let mut two = vec![0x16, 3, 1, 0, 10];
        two.extend_from_slice(&hs[..10]);
        two.extend_from_slice(&[0x16, 3, 1, 0, (hs.len() - 10) as u8]);
        two.extend_from_slice(&hs[10..]);
        assert_eq!(
            Fingerprints::of(&two, true, true),
            Fingerprints::of(&one, true, true)
        );
        assert_eq!(Fingerprints::of(&one[..40], true, true), None);
        assert_eq!(Fingerprints::of(b"GET / HTTP/1.1\r\n", true, true), None);
    }
}
