//! xDS resource decoding and translation: arbitrary protobuf bytes as each
//! resource type courier accepts over xDS.
#![no_main]

use courier_config::envoy_types::pb::google::protobuf::Any;
use libfuzzer_sys::fuzz_target;

const TYPES: [&str; 4] = [
    "type.googleapis.com/envoy.config.listener.v3.Listener",
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
    "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
];

fuzz_target!(|data: &[u8]| {
    let Some((first, value)) = data.split_first() else {
        return;
    };
    let any = Any {
        type_url: TYPES[usize::from(*first) % TYPES.len()].to_string(),
        value: value.to_vec(),
    };
    let mut ctx = courier_config::Ctx::new();
    let _ = courier_config::resource::translate(&any, &mut ctx);
});
