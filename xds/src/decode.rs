//! Turns the resources of a response into named, translated candidates.

use crate::resource_type::ResourceType;
use crate::store::TypeState;
use courier_config::Ctx;
use courier_config::resource::{self, Resource};
use envoy_types::pb::google::protobuf::Any;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

/// One resource of a response, translated or not.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) digest: u64,
    /// The resource as received (for `/config_dump`).
    pub(crate) raw: Any,
    /// The resource, or every error found in it (`path: message`, joined);
    /// `Ok(None)` for bytes equal to the resource in force whose type keeps
    /// no translation (nothing to apply).
    pub(crate) result: Result<Option<Arc<Resource>>, String>,
}

/// The candidates of a response, and errors that cannot be tied to a name.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) errors: Vec<String>,
}

/// One raw item: its name when the transport carries one (Delta), its version, its body.
pub(crate) struct Raw<'a> {
    pub(crate) name: Option<&'a str>,
    pub(crate) version: &'a str,
    pub(crate) any: &'a Any,
}

/// Decodes and translates `items` of type `t`; a resource whose bytes equal the
/// one in force (`current`) keeps its translation instead of being translated
/// again (a State-of-the-World response resends every resource of its type).
pub(crate) fn decode<'a>(
    t: ResourceType,
    items: impl IntoIterator<Item = Raw<'a>>,
    current: &TypeState,
) -> Decoded {
    let url = t.type_url();
    let mut out = Decoded::default();
    for (i, raw) in items.into_iter().enumerate() {
        let any = raw.any;
        if any.type_url != url {
            out.errors.push(format!(
                "resources[{i}]: type {} in a {} response",
                any.type_url,
                t.short_name()
            ));
            continue;
        }
        let name = raw
            .name
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .or_else(|| t.proto_name(&any.value));
        let Some(name) = name else {
            out.errors
                .push(format!("resources[{i}]: {} without a name", t.short_name()));
            continue;
        };
        let mut h = DefaultHasher::new();
        any.value.hash(&mut h);
        let digest = h.finish();
        if let Some(e) = current.resources.get(&name)
            && e.digest == digest
        {
            out.candidates.push(Candidate {
                name,
                version: raw.version.to_string(),
                digest,
                raw: any.clone(),
                result: Ok(e.resource.clone()),
            });
            continue;
        }
        let mut ctx = Ctx::new();
        let translated = resource::translate(any, &mut ctx);
        let result = match (ctx.finish(()), translated) {
            (Ok(()), Some(r)) => Ok(Some(Arc::new(r))),
            (Err(e), _) => Err(e
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")),
            (Ok(()), None) => Err("cannot be translated".to_string()),
        };
        out.candidates.push(Candidate {
            name,
            version: raw.version.to_string(),
            digest,
            raw: any.clone(),
            result,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::store::Entry;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use prost::{Message, Name};

    fn cla(name: &str) -> Any {
        Any {
            type_url: ClusterLoadAssignment::type_url(),
            value: ClusterLoadAssignment {
                cluster_name: name.into(),
                ..Default::default()
            }
            .encode_to_vec(),
        }
    }

    fn one(any: &Any, current: &TypeState) -> Arc<Resource> {
        let raw = Raw {
            name: None,
            version: "1",
            any,
        };
        let mut d = decode(ResourceType::Endpoints, [raw], current);
        d.candidates.pop().unwrap().result.unwrap().unwrap()
    }

    #[test]
    fn resent_bytes_keep_their_translation() {
        // Endpoints keep no translation in the store; the rule is the same
        // for the types that do, shown here with one kept by hand.
        let a = cla("a");
        let first = one(&a, &TypeState::default());
        let digest = {
            let mut h = DefaultHasher::new();
            a.value.hash(&mut h);
            h.finish()
        };
        let mut current = TypeState::default();
        current.resources.insert(
            "a".into(),
            Arc::new(Entry {
                version: "1".into(),
                digest,
                last_updated: std::time::SystemTime::now(),
                resource: Some(Arc::clone(&first)),
                raw: Arc::from(a.value.as_slice()),
            }),
        );
        // The same bytes: the translation in force, not a new one.
        assert!(Arc::ptr_eq(&one(&a, &current), &first));
        // Other bytes under the same name: translated.
        let mut changed = cla("a");
        changed.value.push(0x12);
        changed.value.push(0);
        assert!(!Arc::ptr_eq(&one(&changed, &current), &first));
    }
}
