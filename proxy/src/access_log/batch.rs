//! A worker's batches of log items for the loggers that send over gRPC (the
//! OpenTelemetry and HTTP gRPC access loggers), as Envoy's per-thread gRPC
//! loggers keep them: one batch per logger config, sent when it reaches the
//! config's buffer size or when its flush timer fires, whichever is first.
//! What a send does is the logger's own.

use std::sync::Arc;
use std::time::Duration;

/// One logger config's items waiting on this worker.
pub(crate) struct Batch<C, T, S> {
    /// The logger's config (batches are told apart by its address).
    pub config: Arc<C>,
    /// The items, in the order logged.
    pub items: Vec<T>,
    /// Their encoded size, against the buffer size.
    bytes: usize,
    /// A flush timer is running for the batch.
    timer: bool,
    /// What the logger keeps per batch (its stats, its stream).
    pub state: S,
}

impl<C, T, S> Batch<C, T, S> {
    /// The items to send now; the batch is empty after.
    pub fn take(&mut self) -> Vec<T> {
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }
}

/// A worker's batches for one kind of logger.
pub(crate) struct Batches<C, T, S>(Vec<Batch<C, T, S>>);

impl<C, T, S> Default for Batches<C, T, S> {
    fn default() -> Self {
        Batches(Vec::new())
    }
}

/// What [`Batches::push`] found.
pub(crate) struct Pushed {
    /// The batch reached its buffer size: send it now.
    pub full: bool,
}

impl<C, T, S> Batches<C, T, S> {
    /// Adds `item` (`size` bytes encoded) to `config`'s batch, made with
    /// `state` on its first item; the batch, and whether it is full at `limit`.
    pub fn push(
        &mut self,
        config: &Arc<C>,
        item: T,
        size: usize,
        limit: usize,
        state: impl FnOnce() -> S,
    ) -> Option<(&mut Batch<C, T, S>, Pushed)> {
        let i = match self.0.iter().position(|b| Arc::ptr_eq(&b.config, config)) {
            Some(i) => i,
            None => {
                self.0.push(Batch {
                    config: Arc::clone(config),
                    items: Vec::new(),
                    bytes: 0,
                    timer: false,
                    state: state(),
                });
                self.0.len() - 1
            }
        };
        let b = self.0.get_mut(i)?;
        b.items.push(item);
        b.bytes += size;
        let full = b.bytes >= limit;
        Some((b, Pushed { full }))
    }

    /// `config`'s batch, if it has one (its timer fired: no timer runs now).
    pub fn fired(&mut self, config: &Arc<C>) -> Option<&mut Batch<C, T, S>> {
        let b = self.0.iter_mut().find(|b| Arc::ptr_eq(&b.config, config))?;
        b.timer = false;
        Some(b)
    }

    /// Every batch (a worker's last flush).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Batch<C, T, S>> {
        self.0.iter_mut()
    }
}

/// Whether `b` needs a flush timer now (it holds items and none runs); marks
/// one as running.
pub(crate) fn needs_timer<C, T, S>(b: &mut Batch<C, T, S>) -> bool {
    !b.items.is_empty() && !std::mem::replace(&mut b.timer, true)
}

/// Runs `fire` for `config` after `after`, on this worker's runtime (so the
/// task sees this thread's batches).
pub(crate) fn arm<C: Send + Sync + 'static>(after: Duration, config: Arc<C>, fire: fn(&Arc<C>)) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            tokio::time::sleep(after).await;
            fire(&config);
        });
    }
}
