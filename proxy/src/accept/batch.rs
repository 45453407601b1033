//! A listener's `max_connections_to_accept_per_socket_event`: how many
//! connections a worker takes from one listening socket in a row before its
//! other tasks (the connections it just accepted, their requests) get to run.
//!
//! Envoy accepts up to that many connections per readiness event of the
//! socket, then goes back to its event loop even when more are pending; unset,
//! it accepts everything pending. Here a "socket event" ends when the socket
//! has nothing more to accept (its poll is pending); past the limit within one
//! event the accept loop yields to the worker's scheduler first.

use std::future::poll_fn;
use std::io;
#[cfg(test)]
use std::net::SocketAddr;
#[cfg(test)]
use tokio::net::{TcpListener, TcpStream};

/// One accept loop's count of connections taken since the socket last had
/// none pending (or since it last yielded).
#[derive(Debug, Default)]
pub struct AcceptBatch {
    in_row: u32,
}

impl AcceptBatch {
    /// Accepts the next connection on `listener`, first letting the worker's
    /// other tasks run when `max` connections were taken in a row. `max` is
    /// read per call: a listener update may change it.
    #[cfg(test)]
    pub async fn accept(
        &mut self,
        listener: &TcpListener,
        max: Option<u32>,
    ) -> io::Result<(TcpStream, SocketAddr)> {
        self.accept_with(max, |cx| listener.poll_accept(cx)).await
    }

    /// Accepts the next connection with `poll_accept` (a TCP or a Unix
    /// listener's), first letting the worker's other tasks run when `max`
    /// connections were taken in a row. `max` is read per call: a listener
    /// update may change it.
    pub async fn accept_with<T>(
        &mut self,
        max: Option<u32>,
        mut poll_accept: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<io::Result<T>>,
    ) -> io::Result<T> {
        if max.is_some_and(|max| self.in_row >= max) {
            self.in_row = 0;
            tokio::task::yield_now().await;
        }
        let in_row = &mut self.in_row;
        let accepted = poll_fn(|cx| {
            let polled = poll_accept(cx);
            if polled.is_pending() {
                // The socket is drained: the next readiness is a new event.
                *in_row = 0;
            }
            polled
        })
        .await;
        self.in_row = self.in_row.saturating_add(1);
        accepted
    }
}

#[cfg(test)]
mod tests {
    use super::AcceptBatch;
    use std::cell::RefCell;
    use std::rc::Rc;
    use tokio::net::{TcpListener, TcpStream};

    /// Accepts `n` connections that are all pending at once, spawning a task
    /// per connection, and returns the order in which accepts and those tasks
    /// ran ("a0" accepted connection 0, "t0" its task ran).
    async fn order(max: Option<u32>, n: usize) -> Vec<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut batch = AcceptBatch::default();
        let mut tasks = Vec::new();
        for i in 0..n {
            let _conn = batch.accept(&listener, max).await.unwrap();
            log.borrow_mut().push(format!("a{i}"));
            let log = Rc::clone(&log);
            tasks.push(tokio::task::spawn_local(async move {
                log.borrow_mut().push(format!("t{i}"));
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        drop(clients);
        Rc::try_unwrap(log).unwrap().into_inner()
    }

    fn run(max: Option<u32>, n: usize) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, order(max, n))
    }

    // One per event: each accepted connection's task runs before the next
    // connection is taken.
    #[test]
    fn one_per_event_lets_each_connection_run_before_the_next_accept() {
        assert_eq!(run(Some(1), 3), ["a0", "t0", "a1", "t1", "a2", "t2"]);
    }

    #[test]
    fn two_per_event_accepts_in_pairs() {
        assert_eq!(
            run(Some(2), 4),
            ["a0", "a1", "t0", "t1", "a2", "a3", "t2", "t3"]
        );
    }

    // Unset: everything pending is accepted before the tasks run (Envoy's
    // default).
    #[test]
    fn unset_accepts_all_pending_first() {
        assert_eq!(run(None, 3), ["a0", "a1", "a2", "t0", "t1", "t2"]);
    }
}
