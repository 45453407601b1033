//! Real proxy processes for end-to-end tests: courier or Envoy started from a
//! bootstrap whose ports are all 0, found through `--admin-address-path` and the
//! admin `/listeners` endpoint (both print `name::ip:port` lines).

use crate::client;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Which proxy a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// courier, this build.
    Courier,
    /// Real Envoy, the oracle.
    Envoy,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Courier => "courier",
            Kind::Envoy => "envoy",
        })
    }
}

/// A running proxy; killed when dropped.
pub struct Proxy {
    /// Which proxy.
    pub kind: Kind,
    /// The admin address (`ip:port`).
    pub admin: String,
    /// Listener name to its bound address (`ip:port`).
    pub listeners: HashMap<String, String>,
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 20 ms, up to `tries` times (bounded by count, not a clock).
pub fn poll<T>(tries: u32, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..tries {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

impl Proxy {
    /// Starts `bin` as `kind` with the bootstrap `yaml` (admin and listeners on
    /// port 0), one worker, and waits until it is ready and every listener in
    /// `listener_names` is bound.
    pub fn start(
        kind: Kind,
        bin: &Path,
        yaml: &str,
        listener_names: &[&str],
    ) -> Result<Proxy, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let config = dir.path().join("bootstrap.yaml");
        std::fs::write(&config, yaml).map_err(|e| e.to_string())?;
        let admin_path = dir.path().join("admin-address");
        let log = std::fs::File::create(dir.path().join("log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg("-c")
            .arg(&config)
            .arg("--admin-address-path")
            .arg(&admin_path)
            .args(["--concurrency", "1"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if kind == Kind::Envoy {
            // Parallel test runs must not share Envoy's hot-restart shared memory.
            cmd.args(["--use-dynamic-base-id", "--log-level", "warn"]);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {kind} ({}): {e}", bin.display()))?;
        let mut proxy = Proxy {
            kind,
            admin: String::new(),
            listeners: HashMap::new(),
            child,
            dir,
        };
        proxy.wait_ready(&admin_path, listener_names)?;
        Ok(proxy)
    }

    fn wait_ready(&mut self, admin_path: &PathBuf, names: &[&str]) -> Result<(), String> {
        let child = &mut self.child;
        let admin = poll(1500, || {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return Some(Err(()));
            }
            std::fs::read_to_string(admin_path)
                .ok()
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .map(Ok)
        });
        match admin {
            Some(Ok(a)) => self.admin = a,
            Some(Err(())) => return Err(format!("{} exited:\n{}", self.kind, self.log())),
            None => {
                return Err(format!(
                    "{} wrote no admin address:\n{}",
                    self.kind,
                    self.log()
                ));
            }
        }
        let admin = self.admin.clone();
        let listeners = poll(1500, || {
            let ready = client::get(&admin, "/ready").ok()?;
            if ready.status != 200 {
                return None;
            }
            let text = client::get(&admin, "/listeners").ok()?;
            let map = parse_listeners(&String::from_utf8_lossy(&text.body));
            names
                .iter()
                .all(|n| map.get(*n).is_some_and(|a| !a.ends_with(":0")))
                .then_some(map)
        });
        match listeners {
            Some(map) => {
                self.listeners = map;
                Ok(())
            }
            None => Err(format!(
                "{} did not become ready with listeners {names:?}:\n{}",
                self.kind,
                self.log()
            )),
        }
    }

    /// The address listener `name` is bound to.
    pub fn listener(&self, name: &str) -> Option<&str> {
        self.listeners.get(name).map(String::as_str)
    }

    /// The process's working directory (relative paths in its config, such as
    /// access log files, land here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What the process wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

/// Parses admin `/listeners` text: `name::ip:port` per line.
pub fn parse_listeners(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once("::"))
        .map(|(name, addr)| (name.to_string(), addr.trim().to_string()))
        .collect()
}
