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
