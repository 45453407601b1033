//! The server's phase, which the accept loop and the codecs watch.

/// How far the server has gone towards stopping; phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Accepting and serving.
    Serving,
    /// Listeners closed (`/drain_listeners`); open connections carry on.
    ListenersStopped,
    /// Listeners closed and open connections asked to finish
    /// (`/drain_listeners?graceful`): `connection: close` / GOAWAY.
    ConnectionsDraining,
    /// The server is exiting: drain, then the worker stops.
    Shutdown,
}
