"""A scripted ADS control plane on grpcio + xds-protos (code courier's team did
not write), for xds/tests/python_interop.rs.

Prints `PORT <n>` once listening, then one line per request it judges:
`REQ <mode> <type> version=<v> nonce=<n> node=<id> error=<message>`.
SotW: answers the first CDS request with clusters `a` and `bad` (lb_policy
CLUSTER_PROVIDED), then after the NACK with `a` only (version 2). Delta: the same with
per-resource versions, then removes `a`.
"""

import sys
from concurrent import futures

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2
from envoy.config.endpoint.v3 import endpoint_pb2, endpoint_components_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2, duration_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"


def cluster(name, maglev=False):
    c = cluster_pb2.Cluster(
        name=name,
        connect_timeout=duration_pb2.Duration(seconds=1),
        type=cluster_pb2.Cluster.STATIC,
        load_assignment=endpoint_pb2.ClusterLoadAssignment(
            cluster_name=name,
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    lb_endpoints=[
                        endpoint_components_pb2.LbEndpoint(
                            endpoint=endpoint_components_pb2.Endpoint(
                                address=address_pb2.Address(
                                    socket_address=address_pb2.SocketAddress(
                                        address="127.0.0.1", port_value=1
                                    )
                                )
                            )
                        )
                    ]
                )
            ],
        ),
    )
    if maglev:
        c.lb_policy = cluster_pb2.Cluster.CLUSTER_PROVIDED
    a = any_pb2.Any()
    a.Pack(c)
    return a


def log(mode, req, version):
    node = req.node.id if req.HasField("node") else "-"
    err = req.error_detail.message.replace("\n", " | ") if req.HasField("error_detail") else "-"
    print(
        f"REQ {mode} {req.type_url.rsplit('.', 1)[-1]} version={version} "
        f"nonce={req.response_nonce or '-'} node={node} error={err}",
        flush=True,
    )


class Ads(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def StreamAggregatedResources(self, requests, context):
        step = 0
        for req in requests:
            log("sotw", req, req.version_info or "-")
            if req.type_url != CDS:
                continue
            if step == 0:
                step = 1
                yield discovery_pb2.DiscoveryResponse(
                    version_info="1", type_url=CDS, nonce="n1",
                    resources=[cluster("a"), cluster("bad", maglev=True)],
                )
            elif step == 1 and req.response_nonce == "n1":
                step = 2
                yield discovery_pb2.DiscoveryResponse(
                    version_info="2", type_url=CDS, nonce="n2", resources=[cluster("a")]
                )

    def DeltaAggregatedResources(self, requests, context):
        step = 0
        for req in requests:
            log("delta", req, ",".join(req.resource_names_subscribe) or "-")
            if req.type_url != CDS:
                continue
            if step == 0:
                step = 1
                yield discovery_pb2.DeltaDiscoveryResponse(
                    type_url=CDS, nonce="d1", system_version_info="1",
                    resources=[
                        discovery_pb2.Resource(name="a", version="a1", resource=cluster("a")),
                        discovery_pb2.Resource(
                            name="bad", version="b1", resource=cluster("bad", maglev=True)
                        ),
                    ],
                )
            elif step == 1 and req.response_nonce == "d1":
                step = 2
                yield discovery_pb2.DeltaDiscoveryResponse(
                    type_url=CDS, nonce="d2", system_version_info="2", removed_resources=["a"]
                )


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(Ads(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"PORT {port}", flush=True)
    # Ends when the test closes stdin (or kills the process).
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
