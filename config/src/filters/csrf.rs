//! The CSRF HTTP filter (`envoy.extensions.filters.http.csrf.v3.CsrfPolicy`, as the
//! filter's config and as its per-route config): which requests it checks
//! (`filter_enabled`, `shadow_enabled`, by their default fractions as the other
//! runtime fractions courier reads) and the origins it accepts beside the target's
//! own (`additional_origins`).

use crate::ctx::Ctx;
use crate::matcher::{self, StringMatcher};
use crate::path::Path;
use crate::support::Support;
use crate::tracing::Fraction;
use envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent;
use envoy_types::pb::envoy::extensions::filters::http::csrf::v3 as pb;

/// Fields of `CsrfPolicy` courier implements (all of them).
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.filters.http.csrf.v3.CsrfPolicy",
    &["filter_enabled", "shadow_enabled", "additional_origins"],
)];

/// A validated `CsrfPolicy`.
#[derive(Debug, Clone)]
pub struct CsrfPolicy {
    /// `filter_enabled`: the share of requests refused when their origin does not
    /// match.
    pub filter_enabled: Fraction,
    /// `shadow_enabled`: the share of requests checked and counted but let
    /// through (0 when unset).
    pub shadow_enabled: Fraction,
    /// `additional_origins`: source origins accepted besides the target's.
    pub additional_origins: Vec<StringMatcher>,
}

fn fraction(f: Option<&RuntimeFractionalPercent>) -> Fraction {
    f.and_then(|f| f.default_value.as_ref()).map_or(
        Fraction {
            numerator: 0,
            denominator: 100,
        },
        Fraction::of,
    )
}

/// Translates a `CsrfPolicy`; `filter_enabled` is required (Envoy's validation).
pub fn translate(m: &pb::CsrfPolicy, path: &Path<'_>, ctx: &mut Ctx) -> Option<CsrfPolicy> {
    if m.filter_enabled.is_none() {
        ctx.error(&path.field("filter_enabled"), "is required");
        return None;
    }
    let op = path.field("additional_origins");
    let mut additional_origins = Vec::with_capacity(m.additional_origins.len());
    for (i, o) in m.additional_origins.iter().enumerate() {
        additional_origins.extend(matcher::string_matcher(o, &op.index(i), ctx));
    }
    Some(CsrfPolicy {
        filter_enabled: fraction(m.filter_enabled.as_ref()),
        shadow_enabled: fraction(m.shadow_enabled.as_ref()),
        additional_origins,
    })
}

#[cfg(test)]
mod tests {
    use crate::filters::HttpFilterConfig;
    use crate::filters::test_util::{errors, filter};

    const HEAD: &str = "name: envoy.filters.http.csrf\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.csrf.v3.CsrfPolicy\n";

    #[test]
    fn envoy_gateway_policy_and_refusals() {
        let f = filter(&format!(
            "{HEAD}  filter_enabled: {{default_value: {{numerator: 100}}}}\n  additional_origins: [{{exact: a.test}}, {{suffix: .b.test}}]\n"
        ))
        .unwrap();
        let HttpFilterConfig::Csrf(p) = f.config else {
            panic!("csrf")
        };
        assert_eq!(p.filter_enabled.numerator, 100);
        assert_eq!(p.shadow_enabled.numerator, 0);
        assert!(p.additional_origins[1].matches("x.b.test"));
        assert!(!p.additional_origins[0].matches("x.a.test"));
        assert_eq!(
            errors(filter(HEAD)),
            vec!["typed_config.filter_enabled: is required".to_string()]
        );
    }
}
