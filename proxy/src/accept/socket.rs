//! Listening sockets: one per worker per listener, bound with `SO_REUSEPORT` so the
//! kernel spreads connections across workers without a shared accept queue.

use courier_config::listener::socket_options::SocketOptions;
use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};
use std::net::SocketAddr;

/// Binds (and, with `listen`, listens on) `addr` with `SO_REUSEPORT`; with
/// `freebind` (the listener's `freebind`), also an address not (yet) configured
/// on the host, as Envoy does with `IP_FREEBIND`.
///
/// Port 0 is resolved once by the main thread with a bound, non-listening
/// socket that it keeps, so every worker then binds the same concrete port.
/// `options` (the listener's `socket_options`) are set before binding;
/// accepted connections inherit them.
pub fn bind(
    addr: SocketAddr,
    listen: bool,
    freebind: bool,
    options: &SocketOptions,
) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if freebind {
        if addr.is_ipv6() {
            socket.set_freebind_v6(true)?;
        } else {
            socket.set_freebind_v4(true)?;
        }
    }
    apply(&socket, options)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    if listen {
        socket.listen(1024)?;
    }
    Ok(socket)
}

/// Binds a UDP listener's socket on `addr` (with `freebind`, as [`bind`]).
/// Non-blocking; one socket per listener, so no `SO_REUSEPORT`
/// (see `ActiveListener::udp_socket`).
pub fn bind_udp(addr: SocketAddr, freebind: bool) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if freebind {
        if addr.is_ipv6() {
            socket.set_freebind_v6(true)?;
        } else {
            socket.set_freebind_v4(true)?;
        }
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// Sets `options` on `socket`: the keepalive parameters (which turn
/// keepalive on; the config refuses them without `SO_KEEPALIVE`), then
/// `SO_KEEPALIVE` and `TCP_NODELAY` as given.
fn apply(socket: &Socket, options: &SocketOptions) -> std::io::Result<()> {
    if options.keepalive_params() {
        let secs = |s: u32| std::time::Duration::from_secs(u64::from(s));
        let mut ka = TcpKeepalive::new();
        if let Some(t) = options.keepalive_time {
            ka = ka.with_time(secs(t));
        }
        if let Some(i) = options.keepalive_interval {
            ka = ka.with_interval(secs(i));
        }
        if let Some(n) = options.keepalive_probes {
            ka = ka.with_retries(n);
        }
        socket.set_tcp_keepalive(&ka)?;
    }
    if let Some(on) = options.keepalive {
        socket.set_keepalive(on)?;
    }
    if let Some(on) = options.nodelay {
        socket.set_tcp_nodelay(on)?;
    }
    Ok(())
}

/// Binds and listens on the Unix domain socket `pipe` as Envoy does: a stale
/// socket file at the path is unlinked first, and the file gets the pipe's
/// `mode` when it sets one (an abstract socket, `@name`, has no file).
/// Non-blocking, for a runtime to take.
pub fn bind_unix(
    pipe: &courier_config::core::Pipe,
) -> std::io::Result<std::os::unix::net::UnixListener> {
    if !pipe.is_abstract() {
        // Envoy unlinks whatever is there; a missing file is no error.
        let _ = std::fs::remove_file(&pipe.path);
    }
    let path = crate::maybe_tls::unix_path(&pipe.path);
    let addr = if pipe.is_abstract() {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(&path.as_bytes()[1..])?
    } else {
        std::os::unix::net::SocketAddr::from_pathname(&*path)?
    };
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    if pipe.mode != 0 && !pipe.is_abstract() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pipe.path, std::fs::Permissions::from_mode(pipe.mode))?;
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Envoy Gateway's keepalive options: set on the listening socket and
    /// inherited by the connections it accepts.
    #[test]
    fn accepted_connections_inherit_the_keepalive_options() {
        let options = SocketOptions {
            keepalive: Some(true),
            nodelay: None,
            keepalive_time: Some(50),
            keepalive_interval: Some(200),
            keepalive_probes: Some(7),
        };
        let socket = bind("127.0.0.1:0".parse().unwrap(), true, false, &options).unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        socket.set_nonblocking(false).unwrap();
        let (accepted, _) = socket.accept().unwrap();
        assert!(accepted.keepalive().unwrap());
        assert_eq!(accepted.tcp_keepalive_time().unwrap().as_secs(), 50);
        assert_eq!(accepted.tcp_keepalive_interval().unwrap().as_secs(), 200);
        assert_eq!(accepted.tcp_keepalive_retries().unwrap(), 7);
        // Without options: the kernel's defaults (keepalive off).
        let plain = bind(
            "127.0.0.1:0".parse().unwrap(),
            true,
            false,
            &SocketOptions::default(),
        )
        .unwrap();
        let addr = plain.local_addr().unwrap().as_socket().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        plain.set_nonblocking(false).unwrap();
        let (accepted, _) = plain.accept().unwrap();
        assert!(!accepted.keepalive().unwrap());
    }
}
