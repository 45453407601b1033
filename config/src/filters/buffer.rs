//! The buffer HTTP filter (`envoy.extensions.filters.http.buffer.v3.Buffer`) and
//! its per-route `BufferPerRoute`: the whole request body is read before the
//! request goes on, up to `max_request_bytes` (a longer one is answered 413).

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::extensions::filters::http::buffer::v3 as pb;

/// A validated `Buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffer {
    /// `max_request_bytes`.
    pub max_request_bytes: u32,
}

/// A validated `BufferPerRoute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferPerRoute {
    /// `disabled: true`: the route's requests are not buffered.
    Disabled,
    /// `buffer`: the route's own limit.
    Buffer(Buffer),
}

/// Translates `Buffer` (PGV: `max_request_bytes` is required and above 0).
pub fn translate(m: &pb::Buffer, path: &Path<'_>, ctx: &mut Ctx) -> Option<Buffer> {
    let p = path.field("max_request_bytes");
    match m.max_request_bytes.as_ref().map(|v| v.value) {
        None => {
            ctx.error(&p, "is required");
            None
        }
        Some(0) => {
            ctx.error(&p, "must be greater than 0");
            None
        }
        Some(n) => Some(Buffer {
            max_request_bytes: n,
        }),
    }
}

/// Translates `BufferPerRoute` (PGV: one of `disabled` (true) or `buffer`).
pub fn per_route(m: &pb::BufferPerRoute, path: &Path<'_>, ctx: &mut Ctx) -> Option<BufferPerRoute> {
    use pb::buffer_per_route::Override;
    match &m.r#override {
        Some(Override::Disabled(true)) => Some(BufferPerRoute::Disabled),
        Some(Override::Disabled(false)) => {
            ctx.error(&path.field("disabled"), "value must equal true");
            None
        }
        Some(Override::Buffer(b)) => {
            translate(b, &path.field("buffer"), ctx).map(BufferPerRoute::Buffer)
        }
        None => {
            ctx.error(path, "one of disabled or buffer is required");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Buffer, BufferPerRoute};
    use crate::filters::test_util::{errors, filter, per_route};
    use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

    const T: &str = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3";

    #[test]
    fn limits_and_per_route_overrides() {
        let f = filter(&format!(
            "name: b\ntyped_config: {{'@type': {T}.Buffer, max_request_bytes: 16}}"
        ))
        .unwrap();
        assert!(matches!(
            f.config,
            HttpFilterConfig::Buffer(Buffer {
                max_request_bytes: 16
            })
        ));
        let r = per_route(
            "b",
            &format!("{{'@type': {T}.BufferPerRoute, disabled: true}}"),
        )
        .unwrap();
        assert!(matches!(
            r.config,
            Some(PerRouteFilterConfig::Buffer(BufferPerRoute::Disabled))
        ));
        let r = per_route(
            "b",
            &format!("{{'@type': {T}.BufferPerRoute, buffer: {{max_request_bytes: 9}}}}"),
        )
        .unwrap();
        assert!(matches!(
            r.config,
            Some(PerRouteFilterConfig::Buffer(BufferPerRoute::Buffer(
                Buffer {
                    max_request_bytes: 9
                }
            )))
        ));
    }

    #[test]
    fn envoys_constraints_are_kept() {
        assert_eq!(
            errors(filter(&format!(
                "name: b\ntyped_config: {{'@type': {T}.Buffer}}"
            ))),
            ["typed_config.max_request_bytes: is required"]
        );
        assert_eq!(
            errors(filter(&format!(
                "name: b\ntyped_config: {{'@type': {T}.Buffer, max_request_bytes: 0}}"
            ))),
            ["typed_config.max_request_bytes: must be greater than 0"]
        );
        assert_eq!(
            errors(per_route(
                "b",
                &format!("{{'@type': {T}.BufferPerRoute, disabled: false}}")
            )),
            ["disabled: value must equal true"]
        );
    }
}
