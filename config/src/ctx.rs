//! The translation context: collects every error found while translating.

use crate::error::{ConfigError, FieldError};
use crate::path::Path;

/// Collects errors while a config is translated, so all of them are reported in one run.
#[derive(Debug)]
pub struct Ctx {
    errors: Vec<FieldError>,
    re2_limits: crate::re2_program::Limits,
    static_clusters: Option<std::sync::Arc<std::collections::HashSet<String>>>,
    static_secrets: Option<std::sync::Arc<crate::tls::secrets::StaticSecrets>>,
    node_complete: Option<bool>,
    /// `--service-node` / `--service-cluster` given (they fill the node later).
    node_overrides: (bool, bool),
    /// The DNS caches named so far, to refuse one name with two settings.
    dns_caches: std::collections::HashMap<String, crate::dns_cache::DnsCacheConfig>,
}

impl Default for Ctx {
    fn default() -> Self {
        Self {
            errors: Vec::new(),
            re2_limits: crate::re2_program::process_limits(),
            static_clusters: None,
            static_secrets: None,
            node_complete: None,
            node_overrides: (false, false),
            dns_caches: std::collections::HashMap::new(),
        }
    }
}

impl Ctx {
    /// A context with no errors, checking regexes against the RE2 program-size
    /// limits in force in the process.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the RE2 program-size limits regexes are checked against (the
    /// bootstrap's own runtime, for the bootstrap).
    pub fn set_re2_limits(&mut self, limits: crate::re2_program::Limits) {
        self.re2_limits = limits;
    }

    /// The RE2 program-size limits in force for this translation.
    pub fn re2_limits(&self) -> crate::re2_program::Limits {
        self.re2_limits
    }

    /// Records an error at `path`.
    pub fn error(&mut self, path: &Path<'_>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// Records that the field at `path` names a feature courier does not implement.
    pub fn unsupported(&mut self, path: &Path<'_>, what: impl std::fmt::Display) {
        self.error(path, format!("{what} is not supported"));
    }

    /// Declares the clusters known when this config is loaded, so references to
    /// clusters (routes, gRPC services) can be checked. Left unset where the set
    /// is not known yet (a resource arriving over xDS before its clusters).
    pub fn set_static_clusters(
        &mut self,
        names: std::sync::Arc<std::collections::HashSet<String>>,
    ) {
        self.static_clusters = Some(names);
    }

    /// Declares the bootstrap's static secrets, which TLS contexts may name.
    /// Left unset for xDS resources, which courier does not let name them yet.
    pub(crate) fn set_static_secrets(
        &mut self,
        secrets: std::sync::Arc<crate::tls::secrets::StaticSecrets>,
    ) {
        self.static_secrets = Some(secrets);
    }

    /// The static secrets, when this config may name them.
    pub(crate) fn static_secrets(&self) -> Option<&crate::tls::secrets::StaticSecrets> {
        self.static_secrets.as_deref()
    }

    /// Declares that `--service-node` (`id`) and `--service-cluster`
    /// (`cluster`) fill the node after translation.
    pub(crate) fn set_node_overrides(&mut self, id: bool, cluster: bool) {
        self.node_overrides = (id, cluster);
    }

    /// What [`Self::set_node_overrides`] declared.
    pub(crate) fn node_overrides(&self) -> (bool, bool) {
        self.node_overrides
    }

    /// Declares whether the bootstrap's node has an `id` and a `cluster`
    /// (after `--service-node` / `--service-cluster`), which SDS needs.
    pub(crate) fn set_node_complete(&mut self, complete: bool) {
        self.node_complete = Some(complete);
    }

    /// Whether the node has an `id` and a `cluster`; `None` when not known
    /// (an xDS resource).
    pub(crate) fn node_complete(&self) -> Option<bool> {
        self.node_complete
    }

    /// `Some(true/false)` when the cluster set is known, `None` when it cannot be told.
    pub fn cluster_known(&self, name: &str) -> Option<bool> {
        self.static_clusters.as_ref().map(|s| s.contains(name))
    }

    /// Records a DNS cache's settings; `false` when a cache of the same name
    /// was given other settings earlier in this translation.
    pub(crate) fn remember_dns_cache(&mut self, c: &crate::dns_cache::DnsCacheConfig) -> bool {
        match self.dns_caches.get(&c.name) {
            Some(seen) => seen == c,
            None => {
                self.dns_caches.insert(c.name.clone(), c.clone());
                true
            }
        }
    }

    /// Whether any error was recorded.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Number of errors recorded so far (lets a caller tell whether a step added any).
    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// Adds the errors of another translation, each path prefixed by `path`.
    pub fn extend(&mut self, path: &Path<'_>, err: ConfigError) {
        let prefix = path.to_string();
        let err = if prefix.is_empty() {
            err
        } else {
            err.prefixed(&prefix)
        };
        self.errors.extend(err.errors);
    }

    /// `Ok(value)` if no error was recorded, else every error.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError {
                errors: self.errors,
            })
        }
    }
}
