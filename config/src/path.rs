//! Field paths built on the stack while walking a config.
//!
//! Translation visits every field, but a path is rendered to text only when an
//! error is reported, so walking a large config allocates nothing for paths.

use std::fmt;

/// One step of a path.
#[derive(Clone, Copy, Debug)]
enum Segment<'a> {
    Root,
    Field(&'a str),
    Index(usize),
    Key(&'a str),
}

/// A JSON path such as `static_resources.clusters[2].lb_policy`, as a linked
/// list of segments that borrow from their parents.
#[derive(Clone, Copy, Debug)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    segment: Segment<'a>,
}

impl Path<'static> {
    /// The empty path: the document itself.
    pub const ROOT: Path<'static> = Path {
        parent: None,
        segment: Segment::Root,
    };
}

impl<'a> Path<'a> {
    /// The path of field `name` of the message at this path. `name` may hold
    /// several dotted fields (`"path_config_source.path"`), which saves binding
    /// each intermediate path to a variable.
    pub fn field<'b>(&'b self, name: &'b str) -> Path<'b> {
        Path {
            parent: Some(self),
            segment: Segment::Field(name),
        }
    }

    /// The path of element `index` of the list at this path.
    pub fn index(&self, index: usize) -> Path<'_> {
        Path {
            parent: Some(self),
            segment: Segment::Index(index),
        }
    }

    /// The path of entry `key` of the map at this path.
    pub fn key<'b>(&'b self, key: &'b str) -> Path<'b> {
        Path {
            parent: Some(self),
            segment: Segment::Key(key),
        }
    }

    fn write(&self, out: &mut String) {
        if let Some(parent) = self.parent {
            parent.write(out);
        }
        match self.segment {
            Segment::Root => {}
            Segment::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Segment::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
            Segment::Key(k) => {
                out.push_str("[\"");
                out.push_str(k);
                out.push_str("\"]");
            }
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.write(&mut s);
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fields_indexes_and_keys() {
        let root = Path::ROOT;
        let sr = root.field("static_resources");
        let cl = sr.field("clusters");
        let c2 = cl.index(2);
        let lb = c2.field("lb_policy");
        assert_eq!(lb.to_string(), "static_resources.clusters[2].lb_policy");
        let m = root.field("providers");
        let k = m.key("p1");
        assert_eq!(k.field("issuer").to_string(), "providers[\"p1\"].issuer");
        assert_eq!(Path::ROOT.to_string(), "");
    }
}
