//! What the router records on a response for the access log (which reads it
//! after the body ends): the upstream it chose and why it failed.

use std::sync::Arc;

/// The upstream a request was sent to, kept on the response for the log.
#[derive(Debug, Clone)]
pub struct Upstreamed {
    /// The host picked (none when the cluster had no healthy host).
    pub host: Option<Arc<crate::upstream::host::Host>>,
    /// The cluster's name.
    pub cluster: Arc<courier_config::cluster::Cluster>,
}

/// `%RESPONSE_CODE_DETAILS%` when the router set it (upstream resets).
#[derive(Debug, Clone)]
pub struct Details(pub String);
