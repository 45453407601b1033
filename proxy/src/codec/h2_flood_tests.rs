//! The flood guard's accounting, over an in-memory socket whose peer does not read.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn ping_acks_the_peer_does_not_read_close_the_connection_with_goaway() {
    let (near, mut far) = duplex(1024);
    let mut guard = FloodGuard::new(near);
    let before = CONTROL_FLOODS.load(Ordering::Relaxed);
    guard.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    guard.write_all(&frame(HEADERS, 4, 7, b"x")).await.unwrap();
    let ack = frame(PING, ACK, 0, &[0; 8]);
    let mut failed = None;
    for i in 0..5_000 {
        if let Err(e) = guard.write_all(&ack).await {
            failed = Some(i);
            assert_eq!(e.to_string(), "http2 outbound flood");
            break;
        }
    }
    let at = failed.expect("the flood is detected");
    assert!(
        at > MAX_OUTBOUND_CONTROL_FRAMES,
        "not before the limit: {at}"
    );
    assert!(CONTROL_FLOODS.load(Ordering::Relaxed) > before);
    // Reads fail from now on, and the peer finds whole frames then a GOAWAY
    // (ENHANCE_YOUR_CALM, last stream 7) once it reads.
    let mut b = [0u8; 8];
    assert!(guard.read(&mut b).await.is_err());
    let mut seen = Vec::new();
    let drained = async {
        let mut buf = vec![0u8; 4096];
        loop {
            let _ = std::future::poll_fn(|cx| {
                let _ = Pin::new(&mut guard).poll_flush(cx);
                Poll::Ready(())
            })
            .await;
            match tokio::time::timeout(std::time::Duration::from_millis(50), far.read(&mut buf))
                .await
            {
                Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
    };
    drained.await;
    let goaway = frame(7, 0, 0, &[0, 0, 0, 7, 0, 0, 0, ENHANCE_YOUR_CALM as u8]);
    assert!(seen.ends_with(&goaway), "ends with a GOAWAY");
    // Frames before it are whole: 9 + 9 + 1 bytes, then 17-byte PING ACKs.
    assert_eq!((seen.len() - 19 - goaway.len()) % 17, 0);
}

#[tokio::test]
async fn a_reading_peer_never_queues() {
    let (near, mut far) = duplex(64 * 1024);
    let mut guard = FloodGuard::new(near);
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        let mut total = 0usize;
        loop {
            match far.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    });
    let ack = frame(PING, ACK, 0, &[0; 8]);
    for _ in 0..20_000 {
        guard.write_all(&ack).await.unwrap();
        // As h2 does between reads: the reader gets to run.
        tokio::task::yield_now().await;
    }
    guard.shutdown().await.unwrap();
    drop(guard);
    assert_eq!(reader.await.unwrap(), 20_000 * 17);
}

#[tokio::test]
async fn http1_passes_through() {
    let (near, mut far) = duplex(16);
    let mut guard = FloodGuard::new(near);
    let w = tokio::spawn(async move {
        for _ in 0..100 {
            guard.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        }
        guard.mode
    });
    let mut buf = vec![0u8; 100 * 19];
    far.read_exact(&mut buf).await.unwrap();
    assert_eq!(w.await.unwrap(), Mode::Http1);
}

#[tokio::test]
async fn queued_output_drains_once_the_peer_reads() {
    let (near, far) = duplex(1024);
    let (mut far_rd, _far_wr) = tokio::io::split(far);
    let mut guard = FloodGuard::new(near);
    guard.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    let data = frame(0, 0, 1, &[7; 1000]);
    for _ in 0..50 {
        guard.write_all(&data).await.unwrap();
        guard.flush().await.unwrap();
    }
    // Queued beyond the socket, not lost: a reading peer gets every byte while
    // the connection only reads (as h2 does once it has nothing to write).
    assert!(guard.queued() > 0);
    let (mut rd, _wr) = tokio::io::split(guard);
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 9 + 50 * 1009];
        far_rd.read_exact(&mut buf).await.unwrap();
        buf
    });
    let mut b = [0u8; 1];
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), rd.read(&mut b)).await;
    let got = reader.await.unwrap();
    assert!(got.ends_with(&data));
}

#[tokio::test]
async fn settings_acks_and_resets_count_as_control_frames_and_data_as_frames() {
    for (kind, flags, payload, counter) in [
        (SETTINGS, ACK, &[][..], &CONTROL_FLOODS),
        (RST_STREAM, 0, &[0, 0, 0, 8][..], &CONTROL_FLOODS),
        (0, 0, &[1][..], &FLOODS),
    ] {
        let (near, _far) = duplex(64);
        let mut guard = FloodGuard::new(near);
        guard.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
        let before = counter.load(Ordering::Relaxed);
        let f = frame(kind, flags, 1, payload);
        let mut written = 0;
        for _ in 0..MAX_OUTBOUND_FRAMES + 10 {
            if guard.write_all(&f).await.is_err() {
                break;
            }
            written += 1;
        }
        assert!(
            written < MAX_OUTBOUND_FRAMES + 10,
            "kind {kind}: never flooded"
        );
        assert!(counter.load(Ordering::Relaxed) > before, "kind {kind}");
    }
}

/// Reads from the guard until it fails or 1 MiB has been read; whether it failed.
async fn read_fails(guard: &mut FloodGuard<tokio::io::DuplexStream>) -> bool {
    let mut buf = vec![0u8; 4096];
    let mut total = 0;
    while total < 1 << 20 {
        match guard.read(&mut buf).await {
            Err(_) => return true,
            Ok(0) => return false,
            Ok(n) => total += n,
        }
    }
    false
}

#[tokio::test]
async fn inbound_floods_close_the_connection() {
    let headers = frame(HEADERS, 4, 1, b"\x82");
    let cases: [(Vec<u8>, &AtomicU64); 3] = [
        // Two empty DATA frames in a row without END_STREAM.
        (
            [
                headers.clone(),
                frame(DATA, 0, 1, &[]),
                frame(DATA, 0, 1, &[]),
            ]
            .concat(),
            &EMPTY_FLOODS,
        ),
        // 201 PRIORITY frames with one stream opened.
        (
            [headers.clone()]
                .into_iter()
                .chain((0..201).map(|_| frame(PRIORITY, 0, 3, &[0, 0, 0, 0, 16])))
                .collect::<Vec<_>>()
                .concat(),
            &PRIORITY_FLOODS,
        ),
        // 4 WINDOW_UPDATEs with one stream opened and no DATA sent (3 allowed).
        (
            [headers.clone()]
                .into_iter()
                .chain((0..4).map(|_| frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0])))
                .collect::<Vec<_>>()
                .concat(),
            &WINDOW_UPDATE_FLOODS,
        ),
    ];
    for (frames, counter) in cases {
        let (near, mut far) = duplex(64 * 1024);
        let mut guard = FloodGuard::new(near);
        let before = counter.load(Ordering::Relaxed);
        far.write_all(PREFACE).await.unwrap();
        far.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
        far.write_all(&frames).await.unwrap();
        drop(far);
        assert!(read_fails(&mut guard).await);
        assert!(counter.load(Ordering::Relaxed) > before);
    }
}

#[tokio::test]
async fn ordinary_http2_and_http1_input_passes() {
    // Empty DATA with END_STREAM, WINDOW_UPDATEs within what DATA sent allows,
    // a PRIORITY per stream: all fine.
    let (near, mut far) = duplex(64 * 1024);
    let mut guard = FloodGuard::new(near);
    guard.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    for _ in 0..3 {
        guard.write_all(&frame(DATA, 0, 1, b"abc")).await.unwrap();
    }
    let mut input = PREFACE.to_vec();
    for id in (1..40u32).step_by(2) {
        input.extend(frame(HEADERS, 4, id, b"\x82"));
        input.extend(frame(PRIORITY, 0, id, &[0, 0, 0, 0, 16]));
        input.extend(frame(DATA, END_STREAM, id, &[]));
        input.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
    }
    far.write_all(&input).await.unwrap();
    drop(far);
    assert!(!read_fails(&mut guard).await);
    // HTTP/1 is never walked.
    let (near, mut far) = duplex(64 * 1024);
    let mut guard = FloodGuard::new(near);
    far.write_all(b"POST / HTTP/1.1\r\n\r\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0")
        .await
        .unwrap();
    drop(far);
    assert!(!read_fails(&mut guard).await);
}

#[tokio::test]
async fn configured_limits_replace_envoys_defaults() {
    let limits = H2FloodLimits {
        outbound_control_frames: 20,
        consecutive_empty_frames: 3,
        priority_frames_per_stream: 2,
        ..H2FloodLimits::default()
    };
    // 21 queued PING ACKs the peer does not read are a flood (the default allows 1 000).
    let (near, _far) = duplex(64);
    let mut guard = FloodGuard::with_limits(near, &limits);
    guard.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    let ack = frame(PING, ACK, 0, &[0; 8]);
    let mut written = 0;
    while written < 100 && guard.write_all(&ack).await.is_ok() {
        written += 1;
    }
    // (the 64-byte socket takes the first three, 17 bytes each)
    assert!((20..=24).contains(&written), "flooded after {written}");
    // Three empty DATA frames in a row pass where the default closes at two;
    // the fourth closes; a fifth PRIORITY frame with one stream open closes.
    let headers = frame(HEADERS, 4, 1, b"\x82");
    for (n, kind, payload, fails) in [
        (3, DATA, &[][..], false),
        (4, DATA, &[][..], true),
        (4, PRIORITY, &[0, 0, 0, 0, 16][..], false),
        (5, PRIORITY, &[0, 0, 0, 0, 16][..], true),
    ] {
        let (near, mut far) = duplex(64 * 1024);
        let mut guard = FloodGuard::with_limits(near, &limits);
        far.write_all(PREFACE).await.unwrap();
        far.write_all(&headers).await.unwrap();
        for _ in 0..n {
            far.write_all(&frame(kind, 0, 1, payload)).await.unwrap();
        }
        drop(far);
        assert_eq!(read_fails(&mut guard).await, fails, "{n} of kind {kind}");
    }
}
