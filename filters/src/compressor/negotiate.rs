//! Which encoding a response gets: the request's `Accept-Encoding` against the compressor
//! filters of the chain (Envoy's `chooseEncoding`).
//!
//! Every compressor filter that decodes a request registers itself in the request's
//! [`Registry`]; the first filter that needs a decision on the response computes it from
//! all of them and caches it, and every other compressor filter uses the cached one, so
//! exactly one filter (the one whose encoding won) compresses.

use courier_config::filters::Compressor;
use std::sync::Arc;

/// The compressor filters a request went through, in config order, and the decision once
/// made. Kept in `RequestState::filter_state`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    /// The registered filters' configs.
    pub(crate) filters: Vec<Arc<Compressor>>,
    /// What each of them saw of `accept-encoding` (by position): an earlier compressor
    /// may have removed the header before a later one looked.
    pub(crate) accepts: Vec<Option<String>>,
    /// The cached decision.
    pub(crate) decision: Option<Decision>,
}

impl Registry {
    /// The `accept-encoding` the filter with `config` saw (`None`: it saw none, or never
    /// decoded this request).
    pub(crate) fn accept_encoding(&self, config: &Arc<Compressor>) -> Option<&str> {
        let at = self.filters.iter().position(|f| Arc::ptr_eq(f, config))?;
        self.accepts.get(at)?.as_deref()
    }
}

/// Why the decision is what it is: which `header_*` counter a filter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderStat {
    /// No acceptable encoding could be read (`header_not_valid`).
    NotValid,
    /// The client asked for `identity` (`header_identity`).
    Identity,
    /// `*` chose the first registered compressor (`header_wildcard`).
    Wildcard,
    /// A named encoding (`header_compressor_used` / `header_compressor_overshadowed`).
    ValidCompressor,
}

/// The encoding chosen for a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// The chosen `content-encoding` token (`identity`: none).
    pub(crate) encoding: String,
    /// Why.
    pub(crate) stat: HeaderStat,
}

impl Decision {
    fn new(encoding: &str, stat: HeaderStat) -> Self {
        Self {
            encoding: encoding.to_string(),
            stat,
        }
    }
}

/// An encoding the chain can produce: its registration rank and `choose_first`.
#[derive(Debug, Clone, Copy, Default)]
struct InChain {
    rank: u32,
    choose_first: bool,
}

/// Envoy keeps the allowed encodings in a `std::map` (ordered by name) and reads it with
/// `operator[]`, which inserts a default entry for a missing key; both shape the result
/// (a wildcard takes the lowest rank, ties broken by name), so they are kept here.
#[derive(Debug, Default)]
struct Allowed(Vec<(String, InChain)>);

impl Allowed {
    fn find(&self, k: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_str().cmp(k))
    }
    fn contains(&self, k: &str) -> bool {
        self.find(k).is_ok()
    }
    fn insert_absent(&mut self, k: &str, v: InChain) -> bool {
        match self.find(k) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, (k.to_string(), v));
                true
            }
        }
    }
    fn remove(&mut self, k: &str) {
        if let Ok(at) = self.find(k) {
            self.0.remove(at);
        }
    }
    /// `operator[]`: the entry, inserted with defaults when absent.
    fn entry(&mut self, k: &str) -> InChain {
        self.insert_absent(k, InChain::default());
        self.find(k).map_or(InChain::default(), |at| self.0[at].1)
    }
}

/// The part of a header value before the first `delim` (all of it without one), trimmed.
fn crop_right_trim(s: &str, delim: char) -> &str {
    s.split_once(delim).map_or(s, |(l, _)| l).trim()
}

/// The response's content type as compared with the configs: without parameters, trimmed,
/// lower-cased (Envoy's sets are case-insensitive).
pub(crate) fn content_type_key(content_type: &str) -> String {
    crop_right_trim(content_type, ';').to_ascii_lowercase()
}

/// Chooses the encoding for a response of `content_type` (empty: none) to a request that
/// sent `accept_encoding`, among the `filters` registered (config order).
pub(crate) fn choose(
    filters: &[Arc<Compressor>],
    accept_encoding: &str,
    content_type: &str,
) -> Decision {
    let mut allowed = Allowed::default();
    let mut rank = 0;
    for f in filters {
        // A filter that would not compress this content type steps aside, so that another
        // one (say deflate for JavaScript) can win over an encoding the client prefers.
        if !content_type.is_empty() && !f.content_types.iter().any(|t| t == content_type) {
            continue;
        }
        // Of several filters with one encoding, the first registered counts.
        if allowed.insert_absent(
            f.library.encoding(),
            InChain {
                rank,
                choose_first: f.choose_first,
            },
        ) {
            rank += 1;
        }
    }
    let mut pairs: Vec<(&str, f32)> = Vec::new();
    for token in accept_encoding.split(',').filter(|t| !t.is_empty()) {
        let mut pair = (crop_right_trim(token, ';'), 1.0f32);
        if let Some((_, params)) = token.split_once(';')
            && let Some((key, q)) = params.split_once('=')
            && key.trim().eq_ignore_ascii_case("q")
        {
            match q.trim().parse::<f32>() {
                Ok(q) => pair.1 = q,
                // An unreadable q-value drops the token.
                Err(_) => continue,
            }
        }
        pairs.push(pair);
        if pair.1 == 0.0 {
            // Kept in `pairs` (what the client said) but not producible: with
            // "gzip;q=0, *" the wildcard must not pick gzip.
            allowed.remove(pair.0);
        }
    }
    if pairs.is_empty() || allowed.0.is_empty() {
        return Decision::new("identity", HeaderStat::NotValid);
    }
    let mut choice = ("identity", 0.0f32);
    for &(name, q) in &pairs {
        if (allowed.contains(name) || name == "identity" || name == "*")
            && (q > choice.1 || (q == choice.1 && allowed.entry(name).choose_first))
        {
            choice = (name, q);
        }
    }
    if choice.1 == 0.0 {
        return Decision::new("identity", HeaderStat::NotValid);
    }
    match choice.0 {
        "identity" => Decision::new("identity", HeaderStat::Identity),
        "*" => {
            // The first registered; equal ranks (entries `operator[]` added) go by name.
            let first = allowed
                .0
                .iter()
                .min_by_key(|(_, c)| c.rank)
                .map_or("identity", |(n, _)| n.as_str());
            Decision::new(first, HeaderStat::Wildcard)
        }
        name => Decision::new(name, HeaderStat::ValidCompressor),
    }
}
