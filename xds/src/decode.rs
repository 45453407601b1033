//! Turns the resources of a response into named, translated candidates.

use crate::resource_type::ResourceType;
use courier_config::Ctx;
use courier_config::resource::{self, Resource};
use envoy_types::pb::google::protobuf::Any;
use std::hash::{DefaultHasher, Hash, Hasher};

/// One resource of a response, translated or not.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) digest: u64,
    /// The resource as received (for `/config_dump`).
    pub(crate) raw: Any,
    /// The resource, or every error found in it (`path: message`, joined).
    pub(crate) result: Result<Resource, String>,
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

pub(crate) fn decode<'a>(t: ResourceType, items: impl IntoIterator<Item = Raw<'a>>) -> Decoded {
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
        let mut ctx = Ctx::new();
        let translated = resource::translate(any, &mut ctx);
        let result = match (ctx.finish(()), translated) {
            (Ok(()), Some(r)) => Ok(r),
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
            digest: h.finish(),
            raw: any.clone(),
            result,
        });
    }
    out
}
