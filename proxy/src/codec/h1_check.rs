//! Envoy's HTTP/1.1 request rules where hyper's parser decides otherwise,
//! checked on the bytes before hyper sees them (issue 21).
//!
//! hyper takes a request with both `content-length` and `transfer-encoding`
//! (dropping the length), folds repeated equal lengths, answers 400 to a
//! transfer-coding other than chunked and to versions other than 1.0/1.1, and
//! refuses obs-fold and a bare CR in a value; Envoy answers 400, 400, 501 and
//! 426, and cleans the last two (a fold's line break and a bare CR are
//! removed). It also refuses what hyper forwards: a `#fragment` (runtime flag
//! `http_reject_path_with_fragment`, on by default), `*` on other methods than
//! OPTIONS, absolute-form with a scheme other than http(s), CONNECT with a
//! path, a request target with bytes over 0x7F, and a malformed chunk.
//!
//! [`H1Check`] follows the connection's messages (heads, then bodies by their
//! length or chunks) and:
//! - passes a head it has nothing against untouched (the common case: one
//!   scan of the head, no copy);
//! - rewrites a head with obs-fold or bare CRs in place, as Envoy cleans it;
//! - refuses a head: hyper gets it with its first byte zeroed, so answers 400
//!   after the responses before it (pipelining keeps its order), and the
//!   socket wrapper writes Envoy's reply ([`Refusal`]) in place of hyper's;
//!   nothing after it reaches hyper.
//!
//! A head that arrives in pieces is held back until it is whole (at most
//! hyper's buffer: past that, hyper gets it and answers 431). Upgrades,
//! CONNECT and HTTP/2 are passed through unchecked from their head on.

use std::sync::atomic::{AtomicBool, Ordering};

/// Envoy's reply to a request courier refuses before hyper parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// Status code and reason phrase.
    pub status: &'static str,
    /// The body (`text/plain` when not empty).
    pub body: &'static str,
}

/// A codec error: `400 Bad Request`.
pub const BAD_REQUEST: Refusal = Refusal {
    status: "400 Bad Request",
    body: "Bad Request",
};
/// A transfer-coding other than chunked.
pub const NOT_IMPLEMENTED: Refusal = Refusal {
    status: "501 Not Implemented",
    body: "Not Implemented",
};
/// A version other than HTTP/1.0 and HTTP/1.1.
pub const UPGRADE_REQUIRED: Refusal = Refusal {
    status: "426 Upgrade Required",
    body: "Upgrade Required",
};
/// A request target with a fragment: the connection manager's empty 400.
pub const FRAGMENT: Refusal = Refusal {
    status: "400 Bad Request",
    body: "",
};

/// `envoy.reloadable_features.http_reject_path_with_fragment`: process-wide,
/// as Envoy's runtime; set from the bootstrap's layers at start, and again
/// whenever an RTDS update or `/runtime_modify` changes the layers
/// (`admin::runtime`); a connection reads it as it starts.
static REJECT_FRAGMENT: AtomicBool = AtomicBool::new(true);

/// Sets `http_reject_path_with_fragment` (`false`: the fragment is stripped).
pub fn set_reject_fragment(on: bool) {
    REJECT_FRAGMENT.store(on, Ordering::Relaxed);
}

/// The connection manager's settings the check follows.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// `http_protocol_options.accept_http_10`.
    pub accept_http_10: bool,
    /// `http_reject_path_with_fragment` (else hyper strips the fragment).
    pub reject_fragment: bool,
}

impl Rules {
    /// The rules of a connection manager with `accept_http_10`, under the
    /// runtime in force.
    pub fn new(accept_http_10: bool) -> Self {
        Rules {
            accept_http_10,
            reject_fragment: REJECT_FRAGMENT.load(Ordering::Relaxed),
        }
    }
}

/// Where the check is in the connection's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before or inside a head.
    Head,
    /// This many body bytes still to pass.
    Body(u64),
    /// Inside a chunked body.
    Chunk(Chunk),
    /// Passed through unchecked (upgrade, CONNECT, HTTP/2, or a body the
    /// check cannot follow: hyper refuses it).
    Off,
    /// A head was refused: nothing more reaches hyper.
    Refused,
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size { n: u64, digits: u8 },
    Ext(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
}

/// How a checked head's body is framed.
enum Framing {
    None,
    Length(u64),
    Chunked,
    /// An upgrade, CONNECT or HTTP/2: what follows is not checked.
    Opaque,
}

/// What [`H1Check::head`] made of the bytes at the start of a head.
enum Head {
    /// The head is not whole yet.
    Incomplete,
    /// A whole head of `consumed` bytes, `produced` after cleaning, whose
    /// request line starts at `line`.
    Whole {
        consumed: usize,
        produced: usize,
        line: usize,
        verdict: Result<Framing, Refusal>,
    },
}

/// What [`H1Check::check`] decided about a run of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// `data[..deliver]` goes to hyper now.
    pub deliver: usize,
    /// `data[held..]` is an incomplete head: held back, and passed again at
    /// the front of the next bytes.
    pub held: usize,
}

/// The check of one HTTP/1.1 connection's requests.
#[derive(Debug)]
pub struct H1Check {
    rules: Rules,
    state: State,
    /// The most an incomplete head may hold (hyper's buffer).
    max_head: usize,
    /// How far the search for a held head's end has got (its bytes are
    /// passed again from the head's start).
    searched: usize,
    /// Whether the held head has obs-fold or a bare CR (found before `searched`).
    dirty: bool,
    /// The refused request's reply, once there is one.
    refusal: Option<Refusal>,
}

impl H1Check {
    /// A check for a new connection; heads over `max_head` bytes are left to hyper.
    pub fn new(rules: Rules, max_head: usize) -> Self {
        H1Check {
            rules,
            state: State::Head,
            max_head,
            searched: 0,
            dirty: false,
            refusal: None,
        }
    }

    /// Whether the bytes still need checking (false: pass everything through).
    pub fn active(&self) -> bool {
        self.state != State::Off
    }

    /// The reply for the refused request, once one was refused.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    /// Checks `data` (new bytes, after any held back), rewriting in place.
    pub fn check(&mut self, data: &mut [u8]) -> Checked {
        let (mut r, mut w) = (0usize, 0usize);
        // The request line of the last head in `data` (not yet delivered):
        // refused in place if its chunked body turns out malformed.
        let mut undelivered_line: Option<(usize, usize)> = None;
        while r < data.len() {
            match self.state {
                State::Off => {
                    shift(data, r..data.len(), w);
                    w += data.len() - r;
                    r = data.len();
                }
                State::Refused => r = data.len(),
                State::Body(n) => {
                    let k = usize::try_from(n).unwrap_or(usize::MAX).min(data.len() - r);
                    shift(data, r..r + k, w);
                    (r, w) = (r + k, w + k);
                    self.state = match n - k as u64 {
                        0 => State::Head,
                        left => State::Body(left),
                    };
                }
                State::Chunk(c) => {
                    let start = r;
                    let ok = self.chunks(c, data, &mut r);
                    shift(data, start..r, w);
                    w += r - start;
                    if !ok {
                        match undelivered_line {
                            Some((line, end)) => {
                                // The whole request is here: refused before
                                // hyper forwards any of it.
                                data[line] = 0;
                                w = end;
                                self.refuse(BAD_REQUEST);
                            }
                            // Already forwarded: hyper refuses the body.
                            None => self.state = State::Off,
                        }
                    }
                }
                State::Head => match self.head(&mut data[r..]) {
                    Head::Incomplete => {
                        if data.len() - r > self.max_head {
                            // Too long for hyper too: it answers 431.
                            self.state = State::Off;
                            continue;
                        }
                        return Checked {
                            deliver: w,
                            held: r,
                        };
                    }
                    Head::Whole {
                        consumed,
                        produced,
                        line,
                        verdict,
                    } => {
                        shift(data, r..r + produced, w);
                        let head_at = w;
                        (r, w) = (r + consumed, w + produced);
                        undelivered_line = Some((head_at + line, w));
                        match verdict {
                            Err(refusal) => {
                                data[head_at + line] = 0;
                                self.refuse(refusal);
                            }
                            Ok(Framing::None | Framing::Length(0)) => {}
                            Ok(Framing::Length(n)) => self.state = State::Body(n),
                            Ok(Framing::Chunked) => {
                                self.state = State::Chunk(Chunk::Size { n: 0, digits: 0 });
                            }
                            Ok(Framing::Opaque) => self.state = State::Off,
                        }
                    }
                },
            }
        }
        Checked {
            deliver: w,
            held: data.len(),
        }
    }

    fn refuse(&mut self, refusal: Refusal) {
        self.refusal = Some(refusal);
        self.state = State::Refused;
    }

    /// Follows chunked framing from `*r`; false on a malformed chunk.
    fn chunks(&mut self, mut c: Chunk, data: &[u8], r: &mut usize) -> bool {
        while *r < data.len() {
            if let Chunk::Data(n) = c {
                // The data itself is skipped, not looked at.
                let k = usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .min(data.len() - *r);
                *r += k;
                c = match n - k as u64 {
                    0 => Chunk::DataCr,
                    left => Chunk::Data(left),
                };
                continue;
            }
            let b = data[*r];
            *r += 1;
            c = match c {
                Chunk::Size { n, digits } => match (b as char).to_digit(16) {
                    Some(d) if digits < 16 => Chunk::Size {
                        n: n << 4 | u64::from(d),
                        digits: digits + 1,
                    },
                    Some(_) => return false,
                    None if digits == 0 => return false,
                    None => match b {
                        b'\r' => Chunk::SizeLf(n),
                        // Extensions (and the whitespace hyper allows) to the line's end.
                        b';' | b' ' | b'\t' => Chunk::Ext(n),
                        _ => return false,
                    },
                },
                Chunk::Ext(n) => match b {
                    b'\r' => Chunk::SizeLf(n),
                    b'\n' => return false,
                    _ => Chunk::Ext(n),
                },
                Chunk::SizeLf(n) => match (b, n) {
                    (b'\n', 0) => Chunk::TrailerStart,
                    (b'\n', n) => Chunk::Data(n),
                    _ => return false,
                },
                Chunk::DataCr if b == b'\r' => Chunk::DataLf,
                Chunk::DataLf if b == b'\n' => Chunk::Size { n: 0, digits: 0 },
                Chunk::TrailerStart if b == b'\r' => Chunk::EndLf,
                Chunk::TrailerStart | Chunk::TrailerLine if b == b'\r' => Chunk::TrailerLf,
                Chunk::TrailerStart | Chunk::TrailerLine if b != b'\n' => Chunk::TrailerLine,
                Chunk::TrailerLf if b == b'\n' => Chunk::TrailerStart,
                Chunk::EndLf if b == b'\n' => {
                    self.state = State::Head;
                    return true;
                }
                _ => return false,
            };
        }
        self.state = State::Chunk(c);
        true
    }

    /// Looks at the head at the start of `data`: finds its end, cleans it,
    /// and judges it.
    fn head(&mut self, data: &mut [u8]) -> Head {
        // Empty lines before a request line are skipped (RFC 9112 2.2), as
        // hyper and Envoy do.
        let mut line = 0;
        loop {
            match &data[line..] {
                [b'\r', b'\n', ..] => line += 2,
                [b'\n', ..] => line += 1,
                [] | [b'\r'] => return Head::Incomplete,
                _ => break,
            }
        }
        let Some((end, dirty)) = self.find_end(data, line) else {
            return Head::Incomplete;
        };
        (self.searched, self.dirty) = (0, false);
        let produced = if dirty {
            clean(&mut data[..end], line)
        } else {
            end
        };
        Head::Whole {
            consumed: end,
            produced,
            line,
            verdict: self.judge(&data[line..produced]),
        }
    }

    /// The end of the head whose request line starts at `line`, and whether
    /// it needs cleaning; `None` (and where the search got to) if it is not
    /// whole yet.
    fn find_end(&mut self, data: &[u8], line: usize) -> Option<(usize, bool)> {
        let mut i = self.searched.max(line);
        let mut dirty = self.dirty;
        while let Some(off) = memchr::memchr2(b'\r', b'\n', &data[i..]) {
            let j = i + off;
            let next = data.get(j + 1).copied();
            if data[j] == b'\r' {
                match next {
                    None => break,
                    Some(b'\n') => {}
                    // A bare CR.
                    Some(_) => dirty = true,
                }
                i = j + 1;
                continue;
            }
            match next {
                None => {
                    i = j;
                    break;
                }
                Some(b'\n') => return Some((j + 2, dirty)),
                Some(b'\r') => match data.get(j + 2) {
                    None => {
                        i = j;
                        break;
                    }
                    Some(b'\n') => return Some((j + 3, dirty)),
                    Some(_) => dirty = true,
                },
                // obs-fold.
                Some(b' ' | b'\t') => dirty = true,
                Some(_) => {}
            }
            i = j + 1;
        }
        // Resumed from the last line break (or CR) when more comes.
        (self.searched, self.dirty) = (i.min(data.len()), dirty);
        None
    }

    /// Envoy's verdict on a whole, clean head (from its request line).
    fn judge(&self, head: &[u8]) -> Result<Framing, Refusal> {
        let lf = memchr::memchr(b'\n', head).unwrap_or(head.len());
        let request_line = head[..lf].strip_suffix(b"\r").unwrap_or(&head[..lf]);
        if request_line == b"PRI * HTTP/2.0" {
            return Ok(Framing::Opaque);
        }
        let mut parts = request_line.splitn(3, |&b| b == b' ');
        let (method, target, version) = (parts.next(), parts.next(), parts.next());
        let (Some(method), Some(target)) = (method, target) else {
            // hyper refuses it, as Envoy.
            return Ok(Framing::Opaque);
        };
        if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
            // A method that is not a token: Envoy's 400 before it looks at the
            // version (`\x00\x01 garbage` is not HTTP/0.9); hyper refuses it alike.
            return Ok(Framing::Opaque);
        }
        let http10 = match version {
            Some(b"HTTP/1.1") => false,
            Some(b"HTTP/1.0") => true,
            // HTTP/0.9 (no version) and other versions: Envoy's 426.
            None => return Err(UPGRADE_REQUIRED),
            Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor])
                if major.is_ascii_digit() && minor.is_ascii_digit() =>
            {
                return Err(UPGRADE_REQUIRED);
            }
            // hyper refuses it, as Envoy.
            Some(_) => return Ok(Framing::Opaque),
        };
        target_form(method, target)?;
        let h = headers(&head[(lf + 1).min(head.len())..]);
        if h.content_lengths > 0 && h.transfer_encodings > 0 || h.content_lengths > 1 {
            // Envoy without `allow_chunked_length`; and one length only.
            return Err(BAD_REQUEST);
        }
        if h.not_chunked {
            return Err(NOT_IMPLEMENTED);
        }
        if http10 && h.transfer_encodings > 0 && !self.rules.accept_http_10 {
            // The connection manager's answer to HTTP/1.0 (hyper would say 400).
            return Err(UPGRADE_REQUIRED);
        }
        if self.rules.reject_fragment && memchr::memchr(b'#', target).is_some() {
            return Err(FRAGMENT);
        }
        Ok(if method == b"CONNECT" || h.upgrade {
            Framing::Opaque
        } else if h.transfer_encodings > 0 {
            Framing::Chunked
        } else {
            match h.content_length {
                Some(n) => Framing::Length(n),
                // None, or not a number (hyper refuses it).
                None if h.content_lengths == 0 => Framing::None,
                None => Framing::Opaque,
            }
        })
    }
}

/// Moves `from` down to `to`: nothing to do (and no bytes touched) unless a
/// cleaned head made the output shorter than the input.
fn shift(data: &mut [u8], from: std::ops::Range<usize>, to: usize) {
    if from.start != to {
        data.copy_within(from, to);
    }
}

/// The request-target forms Envoy's codec refuses (RFC 9112 3.2).
fn target_form(method: &[u8], target: &[u8]) -> Result<(), Refusal> {
    if target.iter().any(|&b| b >= 0x80) {
        return Err(BAD_REQUEST);
    }
    if method == b"CONNECT" {
        // authority-form only.
        if target.starts_with(b"/") || memchr::memmem::find(target, b"://").is_some() {
            return Err(BAD_REQUEST);
        }
        return Ok(());
    }
    match target {
        [b'/', ..] => Ok(()),
        b"*" if method == b"OPTIONS" => Ok(()),
        b"*" => Err(BAD_REQUEST),
        _ => match memchr::memmem::find(target, b"://") {
            Some(p)
                if !target[..p].eq_ignore_ascii_case(b"http")
                    && !target[..p].eq_ignore_ascii_case(b"https") =>
            {
                Err(BAD_REQUEST)
            }
            _ => Ok(()),
        },
    }
}

/// What the framing rules need of a head's header lines.
#[derive(Default)]
struct Framed {
    content_lengths: u32,
    content_length: Option<u64>,
    transfer_encodings: u32,
    /// A transfer-encoding whose last coding is not chunked.
    not_chunked: bool,
    upgrade: bool,
}

/// Reads the header lines (after the request line) for [`Framed`].
fn headers(mut rest: &[u8]) -> Framed {
    let mut f = Framed::default();
    while let Some(nl) = memchr::memchr(b'\n', rest) {
        let line = &rest[..nl];
        rest = &rest[nl + 1..];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        // Lengths first: most names are not these.
        match name.len() {
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                f.content_lengths += 1;
                f.content_length = digits(value);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                f.transfer_encodings += 1;
                // hyper's rule: the last coding decides.
                let last = value.rsplit(|&b| b == b',').next().unwrap_or(value);
                // A value with control bytes is hyper's to refuse (400, as Envoy).
                let valid = value.iter().all(|&b| b >= 0x20 && b != 0x7f || b == b'\t');
                if valid && !trim(last).eq_ignore_ascii_case(b"chunked") {
                    f.not_chunked = true;
                }
            }
            7 if name.eq_ignore_ascii_case(b"upgrade") => f.upgrade = true,
            _ => {}
        }
    }
    f
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// A decimal length (no sign, at most 19 digits); `None` otherwise.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// Cleans a head as Envoy does: an obs-fold's line break goes (the
/// whitespace after it stays), and so does a bare CR in a header value. The
/// request line (from `line`) is kept as it is. Returns the new length.
fn clean(head: &mut [u8], line: usize) -> usize {
    let first = memchr::memchr(b'\n', &head[line..]).map_or(head.len(), |p| line + p + 1);
    let (mut r, mut w) = (first, first);
    let mut in_value = false;
    while r < head.len() {
        let b = head[r];
        let crlf = b == b'\r' && head.get(r + 1) == Some(&b'\n');
        if b == b'\r' && !crlf && in_value {
            r += 1;
            continue;
        }
        if b == b'\n' || crlf {
            let next = r + if crlf { 2 } else { 1 };
            if in_value && matches!(head.get(next), Some(b' ' | b'\t')) {
                // obs-fold: the value goes on.
                r = next;
                continue;
            }
            head.copy_within(r..next, w);
            (r, w) = (next, w + (next - r));
            in_value = false;
            continue;
        }
        in_value |= b == b':';
        head[w] = b;
        (r, w) = (r + 1, w + 1);
    }
    w
}

#[cfg(test)]
#[path = "h1_check_tests.rs"]
mod tests;

/// RFC 9110 `tchar`: what a method (a token) is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
