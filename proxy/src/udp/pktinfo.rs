//! A wildcard-bound UDP listener (`0.0.0.0`, `::`, as Envoy Gateway binds
//! them) learns each datagram's own destination address from the kernel
//! (`IP_PKTINFO` / `IPV6_RECVPKTINFO`) and sends its replies from that address,
//! as Envoy's UDP listener does: the session's `%DOWNSTREAM_LOCAL_ADDRESS%` is
//! the address the peer used, and the peer's replies come from it on a host
//! with several addresses.
//!
//! `recvmsg` / `sendmsg` with control messages have no safe wrapper in the
//! crates courier uses; the unsafe code here is confined to building and
//! reading those two calls' structures.

#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Asks the kernel for each datagram's destination address on `socket`.
pub fn enable(socket: &UdpSocket, v6: bool) -> io::Result<()> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    let on: libc::c_int = 1;
    // SAFETY: a valid descriptor, and an int option of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A datagram read: its length, its sender, and its destination address
/// (`None` if the kernel gave none).
pub type Received = (usize, SocketAddr, Option<IpAddr>);

/// Reads one datagram into `buf` (a longer one is cut to `buf`'s length).
pub async fn recv(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Received> {
    let fd = socket.as_raw_fd();
    socket
        .async_io(Interest::READABLE, || recvmsg(fd, buf))
        .await
}

/// Sends `data` to `to` from the local address `from`.
pub async fn send(
    socket: &UdpSocket,
    data: &[u8],
    to: SocketAddr,
    from: IpAddr,
) -> io::Result<usize> {
    let fd = socket.as_raw_fd();
    socket
        .async_io(Interest::WRITABLE, || sendmsg(fd, data, to, from))
        .await
}

/// Room for one control message of either family (8-byte aligned).
type Control = [u64; 8];

fn recvmsg(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    // SAFETY: all-zero is a valid value of these C structs.
    let mut name: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control: Control = [0; 8];
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<Control>() as _;
    // SAFETY: every pointer in `msg` points at a live buffer of the length given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let peer = from_storage(&name).ok_or_else(|| io::Error::other("not an IP sender"))?;
    let mut local = None;
    // SAFETY: `msg` is the header `recvmsg` filled; the macros walk its
    // control buffer within `msg_controllen`, and each payload is read
    // unaligned as the type its level and type name.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::IPPROTO_IP && kind == libc::IP_PKTINFO {
                let info: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                local = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
            } else if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_PKTINFO {
                let info: libc::in6_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                local = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, peer, local))
}

fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((s as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a `sockaddr_in6`.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((s as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn sendmsg(fd: RawFd, data: &[u8], to: SocketAddr, from: IpAddr) -> io::Result<usize> {
    let to_addr = socket2::SockAddr::from(to);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control: Control = [0; 8];
    // SAFETY: all-zero is a valid `msghdr`.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = to_addr.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = to_addr.len();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: `msg` describes `control`, large enough for one message of
    // either payload (`CMSG_SPACE` ≤ 64 bytes); the payload is written
    // unaligned. `sendmsg` only reads the buffers.
    let n = unsafe {
        match from {
            IpAddr::V4(ip) => {
                let len = size_of::<libc::in_pktinfo>() as u32;
                msg.msg_controllen = libc::CMSG_SPACE(len) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::IPPROTO_IP;
                (*c).cmsg_type = libc::IP_PKTINFO;
                (*c).cmsg_len = libc::CMSG_LEN(len) as _;
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(ip).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), info);
            }
            IpAddr::V6(ip) => {
                let len = size_of::<libc::in6_pktinfo>() as u32;
                msg.msg_controllen = libc::CMSG_SPACE(len) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::IPPROTO_IPV6;
                (*c).cmsg_type = libc::IPV6_PKTINFO;
                (*c).cmsg_len = libc::CMSG_LEN(len) as _;
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: ip.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), info);
            }
        }
        libc::sendmsg(fd, &msg, 0)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a wildcard socket, the datagram's destination comes back, and the
    /// reply leaves from it.
    #[tokio::test]
    async fn the_destination_is_read_and_replies_leave_from_it() {
        let server = UdpSocket::bind("0.0.0.0:0").await.unwrap();
        enable(&server, false).unwrap();
        let port = server.local_addr().unwrap().port();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(b"hi", ("127.0.0.1", port)).await.unwrap();
        let mut buf = [0u8; 16];
        let (n, peer, local) = recv(&server, &mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"hi");
        assert_eq!(peer, client.local_addr().unwrap());
        assert_eq!(local, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        send(&server, b"yo", peer, IpAddr::V4(Ipv4Addr::LOCALHOST))
            .await
            .unwrap();
        let (n, from) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"yo");
        assert_eq!(from, SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }

    #[tokio::test]
    async fn ipv6_too() {
        let Ok(server) = UdpSocket::bind("[::]:0").await else {
            return; // no IPv6 here
        };
        enable(&server, true).unwrap();
        let port = server.local_addr().unwrap().port();
        let Ok(client) = UdpSocket::bind("[::1]:0").await else {
            return;
        };
        client.send_to(b"hi", ("::1", port)).await.unwrap();
        let mut buf = [0u8; 16];
        let (_, peer, local) = recv(&server, &mut buf).await.unwrap();
        assert_eq!(local, Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        send(&server, b"yo", peer, IpAddr::V6(Ipv6Addr::LOCALHOST))
            .await
            .unwrap();
        let (_, from) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!(from.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    }
}
