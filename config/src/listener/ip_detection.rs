//! `original_ip_detection_extensions` of a connection manager: how the
//! client's address is found when `use_remote_address` is off: from
//! `x-forwarded-for` (by trusted hop count or trusted CIDRs) or from a header
//! of the operator's choosing, which may also refuse requests without one.

use crate::core;
use crate::ctx::Ctx;
use crate::matcher::{self, Cidr};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::extensions::http::original_ip_detection::custom_header::v3::CustomHeaderConfig;
use envoy_types::pb::envoy::extensions::http::original_ip_detection::xff::v3::XffConfig;
use prost::Name;

/// Fields of the detection extensions courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.http.original_ip_detection.xff.v3.XffConfig",
        ALL,
    ),
    (
        "envoy.extensions.http.original_ip_detection.xff.v3.XffTrustedCidrs",
        ALL,
    ),
    (
        "envoy.extensions.http.original_ip_detection.custom_header.v3.CustomHeaderConfig",
        ALL,
    ),
];

/// One detection extension, tried in config order until one finds an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpDetection {
    /// `envoy.extensions.http.original_ip_detection.xff`.
    Xff {
        /// `xff_num_trusted_hops`: the address this many entries from the
        /// right of `x-forwarded-for` (0: the last).
        hops: u32,
        /// `xff_trusted_cidrs`: when the peer is inside them, the rightmost
        /// entry outside them (a peer outside: no address).
        trusted_cidrs: Option<Vec<Cidr>>,
        /// `skip_xff_append` set to false: the peer (Envoy's own address for
        /// a loopback peer) is appended to `x-forwarded-for` whatever the
        /// detection found, as Envoy 1.40 does; unset means true.
        append: bool,
    },
    /// `envoy.extensions.http.original_ip_detection.custom_header`.
    CustomHeader {
        /// `header_name` (lower-cased).
        header: String,
        /// `allow_extension_to_set_address_as_trusted`: the address found
        /// may make the request internal.
        trusted: bool,
        /// `reject_with_status`: requests without a usable header are
        /// answered with this status.
        reject_status: Option<u16>,
    },
}

/// Translates `original_ip_detection_extensions`.
pub fn translate(
    list: &[TypedExtensionConfig],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<IpDetection> {
    let mut out = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let ep = path.index(i);
        let tp = ep.field("typed_config");
        let Some(any) = e.typed_config.as_ref() else {
            ctx.error(&tp, "is required");
            continue;
        };
        if any.type_url == XffConfig::type_url() {
            let Some(x) = core::unpack::<XffConfig>(any, &tp, ctx) else {
                continue;
            };
            let trusted_cidrs = x.xff_trusted_cidrs.as_ref().map(|t| {
                let xp = tp.field("xff_trusted_cidrs");
                let cp = xp.field("cidrs");
                t.cidrs
                    .iter()
                    .enumerate()
                    .filter_map(|(k, c)| matcher::cidr(c, &cp.index(k), ctx))
                    .collect()
            });
            if trusted_cidrs.is_some() && x.xff_num_trusted_hops > 0 {
                // Envoy's wording.
                ctx.error(
                    &tp,
                    "Cannot set both xff_num_trusted_hops and xff_trusted_cidrs",
                );
            }
            out.push(IpDetection::Xff {
                hops: x.xff_num_trusted_hops,
                trusted_cidrs,
                append: x.skip_xff_append.as_ref().is_some_and(|v| !v.value),
            });
        } else if any.type_url == CustomHeaderConfig::type_url() {
            let Some(c) = core::unpack::<CustomHeaderConfig>(any, &tp, ctx) else {
                continue;
            };
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if c.header_name.is_empty() || !c.header_name.bytes().all(token) {
                ctx.error(
                    &tp.field("header_name"),
                    format!("\"{}\" is not a header name", c.header_name),
                );
                continue;
            }
            let reject_status = c.reject_with_status.as_ref().map(|s| {
                crate::filters::ext_authz::http_status(
                    Some(s),
                    403,
                    &tp.field("reject_with_status"),
                    ctx,
                )
            });
            out.push(IpDetection::CustomHeader {
                header: c.header_name.to_ascii_lowercase(),
                trusted: c.allow_extension_to_set_address_as_trusted,
                reject_status,
            });
        } else {
            ctx.unsupported(&tp, format!("original IP detection extension {}", e.name));
        }
    }
    out
}
