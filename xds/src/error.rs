//! Errors of the xDS client.

/// Why a transport step failed (the client logs it and reconnects).
#[derive(Debug, thiserror::Error)]
pub enum XdsError {
    /// Connecting to the management server failed.
    #[error("cannot connect to the management server: {0}")]
    Connect(String),
    /// The gRPC stream failed or was refused.
    #[error("xDS stream: {0}")]
    Stream(#[from] tonic::Status),
    /// The management server ended the stream.
    #[error("the management server closed the xDS stream")]
    Closed,
    /// A file source could not be read.
    #[error("{0}")]
    File(String),
}
