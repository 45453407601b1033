//! A request waiting for a connection: Envoy's pending request. It holds one of
//! its cluster's `max_pending_requests` slots and sleeps until capacity frees
//! (a connection slot on any worker; an idle connection or a stream of its own
//! worker's pool), woken by whoever frees it (see [`super::circuit`]), or until
//! [`PENDING_WAIT`] passes.
//!
//! The pools' wait loops take the same shape: arm, look for capacity, wait.
//! Arming first means a free that lands between the look and the wait still
//! wakes the request.

use super::circuit::{Circuit, Counts, Held};
use super::pool::SendError;
use crate::stats::ClusterStats;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

/// The longest a request waits as pending before it is refused as an
/// overflow (the route timeout usually ends it first).
pub(super) const PENDING_WAIT: Duration = Duration::from_secs(60);

/// A registered wake-up (see [`Pending::arm`]).
pub(super) type Armed<'a> = Pin<Box<Notified<'a>>>;

/// One pending request.
pub(super) struct Pending<'a> {
    counts: &'a Counts,
    deadline: Instant,
    _slot: Held,
}

impl<'a> Pending<'a> {
    /// Queues a request of priority `high` that found no connection it could
    /// use or open (counting `upstream_cx_overflow`, as Envoy's pool does when
    /// the connection limit stops it), or refuses it as an overflow when
    /// `max_pending_requests` wait already.
    pub(super) fn start(
        circuit: &'a Circuit,
        high: bool,
        stats: &ClusterStats,
    ) -> Result<Self, SendError> {
        stats.cx_overflow.inc();
        let slot = circuit.try_pending(high).ok_or(SendError::Overflow)?;
        Ok(Self {
            counts: circuit.counts(high),
            deadline: Instant::now() + PENDING_WAIT,
            _slot: slot,
        })
    }

    /// Registers for the next free: call before looking for capacity, then
    /// pass the result to [`Pending::wait`] if the look found none.
    pub(super) fn arm(&self) -> Armed<'a> {
        self.counts.armed()
    }

    /// Sleeps until a free after `armed` was made, or refuses the request as
    /// an overflow once it has waited [`PENDING_WAIT`].
    pub(super) async fn wait(&self, armed: Armed<'a>) -> Result<(), SendError> {
        tokio::time::timeout_at(self.deadline, armed)
            .await
            .map_err(|_| SendError::Overflow)
    }
}

#[cfg(test)]
mod tests {
    use super::super::circuit::Circuit;
    use super::{Held, PENDING_WAIT, Pending, SendError};
    use crate::stats::ClusterStats;
    use courier_config::cluster::CircuitBreakers;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::time::Instant;

    /// A pending request's wait for `ready` to say yes, as the pools run it.
    async fn wait_until<T>(
        circuit: Arc<Circuit>,
        mut ready: impl FnMut(&Circuit) -> Option<T>,
    ) -> Result<T, SendError> {
        let stats = ClusterStats::default();
        let pending = Pending::start(&circuit, false, &stats)?;
        loop {
            let armed = pending.arm();
            if let Some(got) = ready(&circuit) {
                return Ok(got);
            }
            pending.wait(armed).await?;
        }
    }

    fn a_connection(c: &Circuit) -> Option<Held> {
        c.try_connection(false)
    }

    /// A circuit of one connection, and that connection's slot.
    fn one_connection_in_use() -> (Arc<Circuit>, Held) {
        let mut cb = CircuitBreakers::default();
        cb.default.max_connections = 1;
        let circuit = Arc::new(Circuit::new(cb));
        let busy = circuit.try_connection(false).expect("the one slot");
        (circuit, busy)
    }

    async fn let_it_wait() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    // On the paused clock a sleep-polling wait moves the clock by its poll
    // interval before it sees the free; a woken one does not move it at all.
    #[tokio::test(start_paused = true)]
    async fn a_freed_connection_slot_wakes_the_pending_request_at_once() {
        let (circuit, busy) = one_connection_in_use();
        let start = Instant::now();
        let waiter = tokio::spawn(wait_until(Arc::clone(&circuit), a_connection));
        let_it_wait().await;
        assert!(!waiter.is_finished(), "no slot is free yet");
        assert_eq!(circuit.counts(false).pending.load(Ordering::Relaxed), 1);
        drop(busy);
        let slot = waiter.await.expect("the waiter");
        assert!(slot.is_ok(), "the freed slot is the waiter's");
        assert_eq!(Instant::now(), start, "woken by the free, not by a timer");
        assert_eq!(circuit.counts(false).pending.load(Ordering::Relaxed), 0);
    }

    // A slot freed on another thread (another worker's connection closing)
    // wakes a request pending on this one.
    #[tokio::test(start_paused = true)]
    async fn a_slot_freed_on_another_thread_wakes_the_pending_request() {
        let (circuit, busy) = one_connection_in_use();
        let start = Instant::now();
        let waiter = tokio::spawn(wait_until(Arc::clone(&circuit), a_connection));
        let_it_wait().await;
        std::thread::spawn(move || drop(busy))
            .join()
            .expect("the other thread");
        assert!(waiter.await.expect("the waiter").is_ok());
        assert_eq!(Instant::now(), start);
    }

    // A free only this thread's requests can use (an idle connection back in
    // the pool, a stream ended) wakes them through wake_local.
    #[tokio::test(start_paused = true)]
    async fn a_local_free_wakes_the_pending_request() {
        let (circuit, _busy) = one_connection_in_use();
        let idle = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let seen = Arc::clone(&idle);
        let waiter = tokio::spawn(wait_until(Arc::clone(&circuit), move |_| {
            seen.load(Ordering::Relaxed).then_some(())
        }));
        let_it_wait().await;
        assert!(!waiter.is_finished());
        idle.store(true, Ordering::Relaxed);
        circuit.counts(false).wake_local();
        assert!(waiter.await.expect("the waiter").is_ok());
        assert_eq!(Instant::now(), start);
    }

    // Nothing frees: the request is refused as an overflow after PENDING_WAIT,
    // and not before.
    #[tokio::test(start_paused = true)]
    async fn a_request_pending_past_the_limit_overflows() {
        let (circuit, _busy) = one_connection_in_use();
        let start = Instant::now();
        let got = wait_until(circuit, a_connection).await;
        assert!(matches!(got, Err(SendError::Overflow)));
        assert_eq!(Instant::now() - start, PENDING_WAIT);
    }

    // At max_pending_requests a request is refused at once.
    #[tokio::test(start_paused = true)]
    async fn max_pending_requests_refuses_at_once() {
        let mut cb = CircuitBreakers::default();
        cb.default.max_connections = 1;
        cb.default.max_pending_requests = 0;
        let circuit = Arc::new(Circuit::new(cb));
        let stats = ClusterStats::default();
        assert!(matches!(
            Pending::start(&circuit, false, &stats),
            Err(SendError::Overflow)
        ));
        assert_eq!(stats.cx_overflow.get(), 1);
    }
}
