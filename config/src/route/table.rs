//! The route index of a virtual host: Envoy's first-match order without testing
//! every route's strings.
//!
//! `prefix`, `path` and `path_separated_prefix` routes are stored in a radix trie
//! keyed by their string (one trie for case-sensitive routes, one with lower-cased
//! keys for the others). Walking the request path down a trie visits exactly the
//! routes whose string is a prefix of the path, so a lookup costs the path's
//! length, not the table's size. Regex routes are kept in a list. The answer is
//! the smallest route position among candidates that fully match; each candidate
//! list is sorted, so a list is abandoned as soon as its positions pass the best
//! match found so far.

use super::entry::Route;
use super::route_match::{PathMatch, RouteMatch, RouteRequest, path_without_query};

/// How a trie entry's key must relate to the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The full path (query included) starts with the key.
    Prefix,
    /// The path without query equals the key.
    Exact,
    /// The path without query equals the key or continues with `/`.
    Separated,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    position: u32,
    kind: Kind,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// Bytes on the edge from the parent (empty only for the root).
    label: Box<[u8]>,
    /// Children, sorted by the first byte of their label.
    children: Vec<u32>,
    /// Routes whose key ends here, by ascending position.
    entries: Vec<Entry>,
}

/// A radix trie of route keys.
#[derive(Debug, Clone)]
struct Trie {
    nodes: Vec<Node>,
    /// Keys are lower-cased and the walk folds the path's ASCII case.
    fold: bool,
}

impl Trie {
    fn new(fold: bool) -> Self {
        Self {
            nodes: vec![Node::default()],
            fold,
        }
    }

    fn is_empty(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].entries.is_empty()
    }

    fn child(&self, node: usize, byte: u8) -> Result<usize, usize> {
        self.nodes[node]
            .children
            .binary_search_by_key(&byte, |&c| self.nodes[c as usize].label[0])
    }

    /// Inserts `key`; entries must be inserted by ascending position.
    fn insert(&mut self, key: &[u8], entry: Entry) {
        let mut node = 0usize;
        let mut rest = key;
        loop {
            let Some(&first) = rest.first() else {
                self.nodes[node].entries.push(entry);
                return;
            };
            match self.child(node, first) {
                Err(at) => {
                    let id = self.nodes.len() as u32;
                    self.nodes.push(Node {
                        label: rest.into(),
                        children: Vec::new(),
                        entries: vec![entry],
                    });
                    self.nodes[node].children.insert(at, id);
                    return;
                }
                Ok(i) => {
                    let c = self.nodes[node].children[i] as usize;
                    let label = &self.nodes[c].label;
                    let common = label.iter().zip(rest).take_while(|(a, b)| a == b).count();
                    if common < label.len() {
                        // Split the edge: a new node takes the common part.
                        let mid = self.nodes.len() as u32;
                        let (head, tail) = label.split_at(common);
                        let (head, tail): (Box<[u8]>, Box<[u8]>) = (head.into(), tail.into());
                        self.nodes[c].label = tail;
                        self.nodes.push(Node {
                            label: head,
                            children: vec![c as u32],
                            entries: Vec::new(),
                        });
                        self.nodes[node].children[i] = mid;
                        node = mid as usize;
                    } else {
                        node = c;
                    }
                    rest = &rest[common..];
                }
            }
        }
    }

    /// Calls `visit(depth, entries)` for every node whose key is a prefix of `path`.
    fn walk(&self, path: &[u8], mut visit: impl FnMut(usize, &[Entry])) {
        let mut node = 0usize;
        let mut depth = 0usize;
        visit(0, &self.nodes[0].entries);
        while depth < path.len() {
            let byte = if self.fold {
                path[depth].to_ascii_lowercase()
            } else {
                path[depth]
            };
            let Ok(i) = self.child(node, byte) else {
                return;
            };
            let c = self.nodes[node].children[i] as usize;
            let label = &self.nodes[c].label;
            let Some(seg) = path.get(depth..depth + label.len()) else {
                return;
            };
            let same = if self.fold {
                seg.eq_ignore_ascii_case(label)
            } else {
                seg == &label[..]
            };
            if !same {
                return;
            }
            depth += label.len();
            node = c;
            visit(depth, &self.nodes[c].entries);
        }
    }
}

/// The compiled route index of one virtual host.
#[derive(Debug, Clone)]
pub(crate) struct RouteIndex {
    sensitive: Trie,
    insensitive: Trie,
    /// Positions of routes that are not in a trie (regexes), ascending.
    linear: Vec<u32>,
}

impl RouteIndex {
    /// Builds the index of `matches`, given in route order.
    pub(crate) fn build<'a>(matches: impl Iterator<Item = &'a RouteMatch>) -> Self {
        let mut index = Self {
            sensitive: Trie::new(false),
            insensitive: Trie::new(true),
            linear: Vec::new(),
        };
        for (i, m) in matches.enumerate() {
            let position = i as u32;
            let (key, kind) = match &m.path {
                PathMatch::Prefix(p) => (p, Kind::Prefix),
                PathMatch::Exact(p) => (p, Kind::Exact),
                PathMatch::SeparatedPrefix(p) => (p, Kind::Separated),
                PathMatch::Regex(_) => {
                    index.linear.push(position);
                    continue;
                }
            };
            let trie = if m.case_sensitive {
                &mut index.sensitive
            } else {
                &mut index.insensitive
            };
            // Keys of case-insensitive routes are stored lower-cased already.
            trie.insert(key.as_bytes(), Entry { position, kind });
        }
        index
    }

    /// The position of the first route (in config order) that matches `req`.
    pub(crate) fn select<R: RouteRequest + ?Sized>(
        &self,
        routes: &[Route],
        req: &R,
    ) -> Option<usize> {
        let full = req.path();
        let bare_len = path_without_query(full).len();
        let bytes = full.as_bytes();
        let mut best = u32::MAX;
        for trie in [&self.sensitive, &self.insensitive] {
            if trie.is_empty() {
                continue;
            }
            trie.walk(bytes, |depth, entries| {
                for e in entries {
                    if e.position >= best {
                        break;
                    }
                    let path_ok = match e.kind {
                        Kind::Prefix => true,
                        Kind::Exact => depth == bare_len,
                        Kind::Separated => {
                            depth <= bare_len && (depth == bare_len || bytes[depth] == b'/')
                        }
                    };
                    if path_ok
                        && routes
                            .get(e.position as usize)
                            .is_some_and(|r| r.route_match.conditions_match(req))
                    {
                        best = e.position;
                        break;
                    }
                }
            });
        }
        for &position in &self.linear {
            if position >= best {
                break;
            }
            if routes
                .get(position as usize)
                .is_some_and(|r| r.route_match.matches(req))
            {
                best = position;
                break;
            }
        }
        (best != u32::MAX).then_some(best as usize)
    }
}
