//! Polling a connection's rarely-firing futures only when they woke.
//!
//! A connection task selects over its codec and the events that end it (drain,
//! idle and lifetime timers, a retired listener). The task wakes for the codec
//! several times per request, and a plain `select!` polls every branch on every
//! wake: each poll of a watch wait or a timer re-registers it, about a thousand
//! instructions per proxied request for events that fire once in a connection's
//! life. A [`WakeGate`] gives such futures a waker of their own and polls them
//! only after it fired.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;

/// Polls what it guards only on the first poll, after the guarded futures'
/// own waker fired, and after they were last ready (a future ready once may be
/// reset, which registers no waker until it is polled again).
#[derive(Debug)]
pub struct WakeGate {
    flag: Arc<Flag>,
    /// `flag` as a waker, built once: the guarded futures keep clones of it.
    waker: Waker,
}

#[derive(Debug)]
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Default for WakeGate {
    fn default() -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&flag));
        Self { flag, waker }
    }
}

impl WakeGate {
    /// Runs `poll` with the gate's waker if the guarded futures woke since it
    /// last ran (or were ready then); else `Pending`, with the task's waker
    /// kept for their next wake.
    pub fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let out = poll(&mut Context::from_waker(&self.waker));
        if out.is_ready() {
            self.flag.woken.store(true, Ordering::Release);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::{Future, poll_fn};
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Counts how often the gate let a poll through.
    async fn gated_sleep(
        gate: &mut WakeGate,
        sleep: std::pin::Pin<&mut tokio::time::Sleep>,
        polls: &AtomicUsize,
    ) {
        let mut sleep = sleep;
        poll_fn(|cx| {
            gate.poll(cx, |cx| {
                polls.fetch_add(1, Ordering::Relaxed);
                sleep.as_mut().poll(cx)
            })
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_guarded_timer_is_polled_once_armed_and_once_fired() {
        let mut gate = WakeGate::default();
        let polls = AtomicUsize::new(0);
        let sleep = tokio::time::sleep(Duration::from_secs(5));
        tokio::pin!(sleep);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(8);
        let sender = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _ = tx.send(()).await;
            }
        });
        let gated = gated_sleep(&mut gate, sleep.as_mut(), &polls);
        tokio::pin!(gated);
        let mut other_wakes = 0;
        // The task wakes three times for the channel before the timer fires.
        loop {
            tokio::select! {
                biased;
                Some(()) = rx.recv() => other_wakes += 1,
                () = gated.as_mut() => break,
            }
        }
        assert_eq!(other_wakes, 3);
        assert_eq!(
            polls.load(Ordering::Relaxed),
            2,
            "armed once, polled again when fired"
        );
        let _ = sender.await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_future_is_polled_again_after_a_reset() {
        let mut gate = WakeGate::default();
        let polls = AtomicUsize::new(0);
        let sleep = tokio::time::sleep(Duration::from_secs(1));
        tokio::pin!(sleep);
        gated_sleep(&mut gate, sleep.as_mut(), &polls).await;
        sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + Duration::from_secs(1));
        // Without the poll after ready, the reset timer would hold no waker
        // and this would never end.
        tokio::time::timeout(
            Duration::from_secs(10),
            gated_sleep(&mut gate, sleep.as_mut(), &polls),
        )
        .await
        .unwrap_or_else(|_| unreachable!("the reset timer fired"));
        assert_eq!(polls.load(Ordering::Relaxed), 4);
    }
}
