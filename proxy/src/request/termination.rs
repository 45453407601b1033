//! Why a network filter closed a connection before its terminal filter
//! (network RBAC's denial), as the connection's log lines render it.

use std::sync::OnceLock;

/// Why a network filter closed a connection, for its log lines.
#[derive(Debug, Default)]
pub struct Termination {
    /// A denial: its termination details and the bytes read with the first
    /// read, which were dropped.
    pub denied: OnceLock<(String, u64)>,
}

impl Termination {
    /// `%CONNECTION_TERMINATION_DETAILS%`, once denied.
    pub fn details(&self) -> Option<&str> {
        self.denied.get().map(|(d, _)| d.as_str())
    }

    /// The bytes read before the denial (Envoy counts them as received).
    pub fn read(&self) -> u64 {
        self.denied.get().map_or(0, |(_, n)| *n)
    }
}
