//! The two `xds.type.matcher.v3` messages of CEL matching, which the
//! `envoy-types` crate does not generate (cncf/xds `xds/type/matcher/v3/cel.proto`
//! and `http_inputs.proto`); `build.rs` adds their descriptors to the pool the
//! same way, so configs naming them decode.

use envoy_types::pb::xds::r#type::v3::CelExpression;

/// `xds.type.matcher.v3.CelMatcher`: matches when the expression is `true`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CelMatcher {
    /// The expression.
    #[prost(message, optional, tag = "1")]
    pub expr_match: Option<CelExpression>,
    /// Free text; not used.
    #[prost(string, tag = "2")]
    pub description: String,
}

impl prost::Name for CelMatcher {
    const NAME: &'static str = "CelMatcher";
    const PACKAGE: &'static str = "xds.type.matcher.v3";
    fn full_name() -> String {
        "xds.type.matcher.v3.CelMatcher".into()
    }
    fn type_url() -> String {
        "type.googleapis.com/xds.type.matcher.v3.CelMatcher".into()
    }
}

/// `xds.type.matcher.v3.HttpAttributesCelMatchInput`: the request's (and,
/// where there is one, the response's) attributes, for a [`CelMatcher`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpAttributesCelMatchInput {}

impl prost::Name for HttpAttributesCelMatchInput {
    const NAME: &'static str = "HttpAttributesCelMatchInput";
    const PACKAGE: &'static str = "xds.type.matcher.v3";
    fn full_name() -> String {
        "xds.type.matcher.v3.HttpAttributesCelMatchInput".into()
    }
    fn type_url() -> String {
        "type.googleapis.com/xds.type.matcher.v3.HttpAttributesCelMatchInput".into()
    }
}
