//! `path_config_source`: a file holding a `DiscoveryResponse`, reloaded when it
//! is replaced (atomic rename: a new inode) or rewritten, or when its
//! `watched_directory` changes (Kubernetes ConfigMap symlink swaps). No ACK/NACK;
//! a bad file leaves the last good config in force.

use crate::apply::{Removal, Shared};
use crate::decode::{self, Raw};
use crate::resource_type::ResourceType;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

/// One file source.
#[derive(Debug, Clone)]
pub struct FileSource {
    /// The type of the resources in it.
    pub type_: ResourceType,
    /// The file.
    pub path: PathBuf,
    /// A directory whose changes trigger a reload.
    pub watched_directory: Option<PathBuf>,
    /// How often the file and directory are checked.
    pub poll_interval: Duration,
}

/// What identifies one version of a file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

async fn stamp(path: &std::path::Path) -> Option<Stamp> {
    let m = tokio::fs::metadata(path).await.ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

impl FileSource {
    /// Watches the file for ever (the task is aborted with the client).
    pub(crate) async fn run(self, shared: std::sync::Arc<Shared>) {
        let mut last: Option<(Option<Stamp>, Option<Stamp>)> = None;
        let mut interest_changed = shared.interests.subscribe();
        loop {
            let file = stamp(&self.path).await;
            let dir = match &self.watched_directory {
                Some(d) => stamp(d).await,
                None => None,
            };
            let now = (file, dir);
            if last.as_ref() != Some(&now) {
                last = Some(now);
                self.load(&shared).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll_interval) => {}
                // A newly wanted name may be in the file already: read it again.
                r = interest_changed.changed() => {
                    if r.is_ok() {
                        last = None;
                    }
                }
            }
        }
    }

    async fn load(&self, shared: &Shared) {
        let t = self.type_;
        let path = self.path.clone();
        let read =
            tokio::task::spawn_blocking(move || courier_config::resource::read_path_source(&path))
                .await;
        let response = match read {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let detail = format!("{}: {e}", self.path.display());
                tracing::warn!(type_ = %t, "xDS file source not applied: {detail}");
                shared
                    .store
                    .update(t, |s| s.last_error = Some(detail.clone()));
                shared.store.count(t, None);
                return;
            }
            Err(_) => return,
        };
        let decoded = decode::decode(
            t,
            response.resources.iter().map(|any| Raw {
                name: None,
                version: &response.version_info,
                any,
            }),
            &shared.store.get(t),
        );
        // Errors are logged and recorded by apply; there is nobody to NACK to.
        let _ = shared
            .apply(t, &response.version_info, decoded, Removal::SotwSet)
            .await;
    }
}
