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

/// A radix trie of route keys as it is built (a node owns its label, children and
/// entries); [`Builder::pack`] lays it out for lookups.
#[derive(Debug, Clone)]
struct Builder {
    nodes: Vec<Node>,
    /// Keys are lower-cased and the walk folds the path's ASCII case.
    fold: bool,
}

impl Builder {
    fn new(fold: bool) -> Self {
        Self {
            nodes: vec![Node::default()],
            fold,
        }
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

    /// The packed form: nodes in breadth-first order, so each node's children are
    /// consecutive and carry their label's first byte; labels and entries in one array
    /// each. A lookup then touches a few contiguous cache lines per level instead of
    /// chasing a node's label, child list and each probed child through the heap.
    fn pack(&self) -> Trie {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut labels = Vec::new();
        let mut entries = Vec::new();
        // Breadth-first: packed position i holds builder node order[i].
        let mut order = vec![0u32];
        let mut i = 0;
        while let Some(&id) = order.get(i) {
            let n = &self.nodes[id as usize];
            let children_start = order.len() as u32;
            order.extend_from_slice(&n.children);
            nodes.push(Packed {
                first: n.label.first().copied().unwrap_or(0),
                label_start: labels.len() as u32,
                label_len: n.label.len() as u32,
                children_start,
                children_len: n.children.len() as u32,
                entries_start: entries.len() as u32,
                entries_len: n.entries.len() as u32,
            });
            labels.extend_from_slice(&n.label);
            entries.extend_from_slice(&n.entries);
            i += 1;
        }
        Trie {
            nodes,
            labels,
            entries,
            fold: self.fold,
        }
    }
}

/// One node of a packed trie; ranges index [`Trie`]'s arrays.
#[derive(Debug, Clone, Copy)]
struct Packed {
    /// The label's first byte (children are sorted by it).
    first: u8,
    label_start: u32,
    label_len: u32,
    children_start: u32,
    children_len: u32,
    entries_start: u32,
    entries_len: u32,
}

/// A packed radix trie of route keys (see [`Builder::pack`]).
#[derive(Debug, Clone)]
struct Trie {
    nodes: Vec<Packed>,
    labels: Vec<u8>,
    entries: Vec<Entry>,
    /// Keys are lower-cased and the walk folds the path's ASCII case.
    fold: bool,
}

impl Trie {
    fn is_empty(&self) -> bool {
        self.nodes.len() <= 1 && self.entries.is_empty()
    }

    fn entries(&self, n: &Packed) -> &[Entry] {
        let start = n.entries_start as usize;
        self.entries
            .get(start..start + n.entries_len as usize)
            .unwrap_or(&[])
    }

    /// Calls `visit(depth, entries)` for every node whose key is a prefix of `path`.
    fn walk(&self, path: &[u8], mut visit: impl FnMut(usize, &[Entry])) {
        let Some(mut node) = self.nodes.first() else {
            return;
        };
        let mut depth = 0usize;
        visit(0, self.entries(node));
        while depth < path.len() {
            let byte = if self.fold {
                path[depth].to_ascii_lowercase()
            } else {
                path[depth]
            };
            let start = node.children_start as usize;
            let Some(children) = self.nodes.get(start..start + node.children_len as usize) else {
                return;
            };
            let Ok(i) = children.binary_search_by_key(&byte, |c| c.first) else {
                return;
            };
            let c = &children[i];
            let label_start = c.label_start as usize;
            let (Some(label), Some(seg)) = (
                self.labels
                    .get(label_start..label_start + c.label_len as usize),
                path.get(depth..depth + c.label_len as usize),
            ) else {
                return;
            };
            let same = if self.fold {
                seg.eq_ignore_ascii_case(label)
            } else {
                seg == label
            };
            if !same {
                return;
            }
            depth += label.len();
            node = c;
            visit(depth, self.entries(c));
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
        let mut sensitive = Builder::new(false);
        let mut insensitive = Builder::new(true);
        let mut linear = Vec::new();
        for (i, m) in matches.enumerate() {
            let position = i as u32;
            let (key, kind) = match &m.path {
                PathMatch::Prefix(p) => (p, Kind::Prefix),
                PathMatch::Exact(p) => (p, Kind::Exact),
                PathMatch::SeparatedPrefix(p) => (p, Kind::Separated),
                PathMatch::Regex(_) => {
                    linear.push(position);
                    continue;
                }
            };
            let trie = if m.case_sensitive {
                &mut sensitive
            } else {
                &mut insensitive
            };
            // Keys of case-insensitive routes are stored lower-cased already.
            trie.insert(key.as_bytes(), Entry { position, kind });
        }
        Self {
            sensitive: sensitive.pack(),
            insensitive: insensitive.pack(),
            linear,
        }
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
