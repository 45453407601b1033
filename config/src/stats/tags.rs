//! Envoy's tag producer: turns a stat name such as
//! `cluster.echo.upstream_rq_200` into a tag-extracted name
//! (`cluster.upstream_rq`) and tags (`envoy.response_code="200"`,
//! `envoy.cluster_name="echo"`), as `TagProducerImpl::produceTags` does.
//!
//! Every extractor reads the original name (not what an earlier extractor
//! left): each match marks the characters of its first capture group for
//! removal, and the name is cut once at the end. Extractors whose pattern starts
//! with a literal first token (`^cluster\.`, `http.$.**`) run only on names with
//! that first token; the others run on every name. When several extractors share
//! a tag name only the first that matches adds its tag.

use std::collections::BTreeMap;

/// One tag of a stat: its name and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The tag's name (`envoy.cluster_name`, or a configured `tag_name`).
    pub name: String,
    /// The value extracted from the stat name (or a fixed value).
    pub value: String,
}

/// How an extractor finds its tag's value.
#[derive(Debug)]
pub(crate) enum Pattern {
    /// A `stats_tags` regex, compiled as ECMAScript (std::regex in Envoy:
    /// lookahead allowed) and searched anywhere in the name; group 1 is removed,
    /// group 2 (else group 1) is the value.
    Ecma(fancy_regex::Regex),
    /// One of Envoy's built-in RE2 patterns (`RE2::PartialMatch`): group 1 must
    /// be non-empty; an empty group 2 takes group 1's text. A value equal to
    /// `negative` is no match (`listener.admin.*` has no address tag).
    Re2 {
        /// The compiled pattern.
        re: regex::Regex,
        /// The value that makes the match void.
        negative: &'static str,
    },
    /// A dotted token pattern (`cluster.*.grpc.$.**`): `*` is any one token,
    /// `**` any number of tokens, `$` the token that becomes the value.
    Tokens(Vec<String>),
    /// A tag with the same value on every stat (`fixed_value`; on every stat
    /// of one first token if the value starts `^word\.`, as Envoy reads it).
    Fixed(String),
}

/// A tag extractor: a tag name and how it finds its value.
#[derive(Debug)]
pub(crate) struct Extractor {
    /// The tag's name.
    pub(crate) name: String,
    /// How the value is found.
    pub(crate) pattern: Pattern,
    /// A substring the name must contain (Envoy's cheap pre-check for built-ins).
    pub(crate) substr: &'static str,
    /// Whether another extractor has the same tag name.
    shared_name: bool,
}

impl Extractor {
    pub(crate) fn new(name: &str, pattern: Pattern, substr: &'static str) -> Self {
        Self {
            name: name.to_string(),
            pattern,
            substr,
            shared_name: false,
        }
    }

    /// The first token the name must have for this extractor to run, if any:
    /// Envoy's `extractRegexPrefix` (a regex starting `^word\.`, `^word(?=\.)`
    /// or `^word$`) and a token pattern's literal first token.
    fn prefix(&self) -> Option<String> {
        let regex = match &self.pattern {
            Pattern::Ecma(re) => re.as_str(),
            Pattern::Re2 { re, .. } => re.as_str(),
            Pattern::Tokens(t) => {
                let first = t.first()?;
                return (!matches!(first.as_str(), "$" | "*" | "**")).then(|| first.clone());
            }
            // Envoy reads a fixed value's first token as it reads a regex's
            // (`TagExtractorFixedImpl` passes the value as the pattern): a value
            // such as `^cluster\.x` confines the tag to names starting `cluster.`.
            Pattern::Fixed(v) => v.as_str(),
        };
        let rest = regex.strip_prefix('^')?;
        let word = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let after = &rest[word..];
        let ends_token = after.starts_with("\\.") || after.starts_with("(?=\\.)") || after == "$";
        (word > 0 && ends_token).then(|| rest[..word].to_string())
    }

    /// Adds this extractor's tag and the byte range to remove, if it matches.
    fn extract(&self, name: &str, tokens: &[&str], out: &mut Extraction) -> bool {
        if !self.substr.is_empty() && !name.contains(self.substr) {
            return false;
        }
        match &self.pattern {
            Pattern::Fixed(v) => {
                out.tag(&self.name, v);
                true
            }
            Pattern::Ecma(re) => {
                // A pattern that fails at run time (backtrack limit) extracts nothing.
                let Ok(Some(c)) = re.captures(name) else {
                    return false;
                };
                if c.len() < 2 {
                    return false;
                }
                let remove = c.get(1);
                // A group that did not take part reads as empty, as in std::regex.
                let value = if c.len() > 2 { c.get(2) } else { remove };
                out.tag(&self.name, value.map_or("", |m| m.as_str()));
                if let Some(m) = remove {
                    out.remove(m.start(), m.end());
                }
                true
            }
            Pattern::Re2 { re, negative } => {
                let Some(c) = re.captures(name) else {
                    return false;
                };
                let Some(remove) = c.get(1).filter(|m| !m.is_empty()) else {
                    return false;
                };
                let value = c
                    .get(2)
                    .filter(|m| !m.is_empty())
                    .map_or(remove.as_str(), |m| m.as_str());
                if !negative.is_empty() && value == *negative {
                    return false;
                }
                out.tag(&self.name, value);
                out.remove(remove.start(), remove.end());
                true
            }
            Pattern::Tokens(pattern) => {
                let mut found = None;
                if !search_tokens(pattern, tokens, 0, 0, 0, &mut found) {
                    return false;
                }
                let Some((index, start)) = found else {
                    return false;
                };
                let value = tokens[index];
                // Remove the token with the dot after it, or for the last
                // token the dot before it (Envoy's TagExtractorTokensImpl).
                let (mut from, mut to) = (start, start + value.len());
                if index + 1 < tokens.len() {
                    to += 1;
                } else {
                    from = from.saturating_sub(1);
                }
                out.tag(&self.name, value);
                out.remove(from, to);
                true
            }
        }
    }
}

/// Matches a token pattern against `tokens` from `input`/`pat` on (Envoy's
/// `searchTags`); notes in `found` the index of the `$` token and its byte
/// offset in the name.
fn search_tokens(
    pattern: &[String],
    tokens: &[&str],
    mut input: usize,
    mut pat: usize,
    mut offset: usize,
    found: &mut Option<(usize, usize)>,
) -> bool {
    while input < tokens.len() && pat < pattern.len() {
        match pattern[pat].as_str() {
            "$" => *found = Some((input, offset)),
            "**" if pat == pattern.len() - 1 => return true,
            "**" => {
                // The rest of the pattern may start at any later token.
                pat += 1;
                while input < tokens.len() {
                    if search_tokens(pattern, tokens, input, pat, offset, found) {
                        return true;
                    }
                    offset += tokens[input].len() + 1;
                    input += 1;
                }
                return false;
            }
            "*" => {}
            literal if literal == tokens[input] => {}
            _ => return false,
        }
        offset += tokens[input].len() + 1;
        input += 1;
        pat += 1;
    }
    pat == pattern.len() && input == tokens.len()
}

/// Tags found so far and the byte ranges to cut from the name.
struct Extraction {
    tags: Vec<Tag>,
    remove: Vec<(usize, usize)>,
}

impl Extraction {
    fn tag(&mut self, name: &str, value: &str) {
        self.tags.push(Tag {
            name: name.to_string(),
            value: value.to_string(),
        });
    }

    fn remove(&mut self, from: usize, to: usize) {
        if from < to {
            self.remove.push((from, to));
        }
    }
}

/// The tag extractors in force: Envoy's defaults (unless
/// `use_all_default_tags: false`), then the configured `stats_tags`.
#[derive(Debug, Default)]
pub struct TagProducer {
    /// Extractors that run on every name, in the order they were added.
    anywhere: Vec<Extractor>,
    /// Extractors by the first token of the names they apply to.
    by_first_token: BTreeMap<String, Vec<Extractor>>,
}

impl TagProducer {
    /// Adds an extractor after those already there.
    pub(crate) fn add(&mut self, mut extractor: Extractor) {
        let shares = |e: &mut Extractor| {
            if e.name == extractor.name {
                e.shared_name = true;
                true
            } else {
                false
            }
        };
        let mut shared = false;
        for e in self
            .anywhere
            .iter_mut()
            .chain(self.by_first_token.values_mut().flatten())
        {
            shared |= shares(e);
        }
        extractor.shared_name = shared;
        match extractor.prefix() {
            Some(p) => self.by_first_token.entry(p).or_default().push(extractor),
            None => self.anywhere.push(extractor),
        }
    }

    /// The tag-extracted name of a stat and its tags, in Envoy's order
    /// (extractors that run anywhere first, then those of the first token).
    pub fn produce(&self, name: &str) -> (String, Vec<Tag>) {
        let tokens: Vec<&str> = name.split('.').collect();
        let mut out = Extraction {
            tags: Vec::new(),
            remove: Vec::new(),
        };
        let first = name.split_once('.').map(|(f, _)| f);
        let keyed = first
            .and_then(|f| self.by_first_token.get(f))
            .into_iter()
            .flatten();
        let mut done: Vec<&str> = Vec::new();
        for e in self.anywhere.iter().chain(keyed) {
            if e.shared_name && done.contains(&e.name.as_str()) {
                continue;
            }
            if e.extract(name, &tokens, &mut out) && e.shared_name {
                done.push(&e.name);
            }
        }
        (cut(name, &mut out.remove), out.tags)
    }
}

/// `name` without the bytes in `ranges` (which may overlap).
fn cut(name: &str, ranges: &mut [(usize, usize)]) -> String {
    ranges.sort_unstable();
    let mut out = String::with_capacity(name.len());
    let mut at = 0;
    for &(from, to) in ranges.iter() {
        if from > at {
            out.push_str(name.get(at..from).unwrap_or(""));
        }
        at = at.max(to);
    }
    out.push_str(name.get(at.min(name.len())..).unwrap_or(""));
    out
}
