//! Listening sockets: one per worker per listener, bound with `SO_REUSEPORT` so the
//! kernel spreads connections across workers without a shared accept queue.

use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;

/// Binds (and, with `listen`, listens on) `addr` with `SO_REUSEPORT`; with
/// `freebind` (the listener's `freebind`), also an address not (yet) configured
/// on the host, as Envoy does with `IP_FREEBIND`.
///
/// Port 0 is resolved once by the main thread with a bound, non-listening
/// socket that it keeps, so every worker then binds the same concrete port.
pub fn bind(addr: SocketAddr, listen: bool, freebind: bool) -> std::io::Result<Socket> {
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
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    if listen {
        socket.listen(1024)?;
    }
    Ok(socket)
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
