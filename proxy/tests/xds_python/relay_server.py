"""An ADS control plane on grpcio + xds-protos (code courier's team did not
write) for proxy/tests/xds_python.rs: it serves, State-of-the-World and Delta,
whatever resources the test gives it, over ADS and (for RTDS) the Runtime
service's own stream.

stdin, one JSON object per line:
  {"op": "set", "type": TYPE_URL, "items": [[NAME, BASE64], ...]}
  {"op": "del", "type": TYPE_URL, "names": [NAME, ...]}
Each resource arrives as the serialized typed message; it is parsed into the
xds-protos class and packed again, so what courier reads was encoded by
Python's protobuf. Each line is one change of its type, pushed at once to every
stream subscribed to the type (SotW: the type's whole set; Delta: the changed
and removed names).

stdout: `PORT <n>` once listening, then one line per request:
`REQ <mode> <type> version=<v> nonce=<n> node=<id> error=<message>`.
argv[1], when given, is the port to listen on (a restarted control plane).
"""

import base64
import json
import queue
import sys
import threading
from concurrent import futures

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401 (registers the type)
from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: F401
    http_connection_manager_pb2,
)
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from envoy.service.runtime.v3 import rtds_pb2, rtds_pb2_grpc
from google.protobuf import any_pb2

CLASSES = {
    "type.googleapis.com/envoy.config.listener.v3.Listener": listener_pb2.Listener,
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration": route_pb2.RouteConfiguration,
    "type.googleapis.com/envoy.config.cluster.v3.Cluster": cluster_pb2.Cluster,
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment":
        endpoint_pb2.ClusterLoadAssignment,
    "type.googleapis.com/envoy.service.runtime.v3.Runtime": rtds_pb2.Runtime,
}

LOCK = threading.Lock()
STATE = {}  # type -> {"version": int, "resources": {name: (version, Any)}}
STREAMS = []  # queues of the open streams


def log(mode, req, version):
    node = req.node.id if req.HasField("node") else "-"
    err = req.error_detail.message.replace("\n", " | ") if req.HasField("error_detail") else "-"
    print(
        f"REQ {mode} {req.type_url.rsplit('.', 1)[-1]} version={version} "
        f"nonce={req.response_nonce or '-'} node={node} error={err}",
        flush=True,
    )


def commands():
    for line in sys.stdin:
        cmd = json.loads(line)
        t = cmd["type"]
        with LOCK:
            st = STATE.setdefault(t, {"version": 0, "resources": {}})
            st["version"] += 1
            v = str(st["version"])
            changed, removed = [], []
            if cmd["op"] == "set":
                for name, b64 in cmd["items"]:
                    msg = CLASSES[t]()
                    msg.ParseFromString(base64.b64decode(b64))
                    a = any_pb2.Any()
                    a.Pack(msg)
                    st["resources"][name] = (v, a)
                    changed.append(name)
            else:
                for name in cmd["names"]:
                    if st["resources"].pop(name, None) is not None:
                        removed.append(name)
            for q in STREAMS:
                q.put(("push", t, changed, removed))


def pump(requests, q):
    try:
        for req in requests:
            q.put(("req", req))
    except grpc.RpcError:
        pass
    q.put(("end",))


class Ads(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def serve(self, requests, delta):
        q = queue.Queue()
        with LOCK:
            STREAMS.append(q)
        threading.Thread(target=pump, args=(requests, q), daemon=True).start()
        subscribed, nonce = set(), 0
        try:
            while True:
                ev = q.get()
                if ev[0] == "end":
                    return
                if ev[0] == "req":
                    req = ev[1]
                    if delta:
                        log("delta", req, ",".join(req.resource_names_subscribe) or "-")
                    else:
                        log("sotw", req, req.version_info or "-")
                    t = req.type_url
                    if t in subscribed or t not in CLASSES:
                        continue
                    subscribed.add(t)
                    with LOCK:
                        st = STATE.get(t)
                        if not st or not st["resources"]:
                            continue
                        names = list(st["resources"])
                    ev = ("push", t, names, [])
                _, t, changed, removed = ev
                if t not in subscribed:
                    continue
                nonce += 1
                # Built under the lock, sent after it (a yield waits for the send).
                with LOCK:
                    st = STATE[t]
                    if delta:
                        resp = discovery_pb2.DeltaDiscoveryResponse(
                            type_url=t, nonce=f"d{nonce}", system_version_info=str(st["version"]),
                            resources=[
                                discovery_pb2.Resource(name=n, version=st["resources"][n][0],
                                                       resource=st["resources"][n][1])
                                for n in changed if n in st["resources"]
                            ],
                            removed_resources=removed,
                        )
                    else:
                        resp = discovery_pb2.DiscoveryResponse(
                            version_info=str(st["version"]), type_url=t, nonce=f"n{nonce}",
                            resources=[a for _, a in st["resources"].values()],
                        )
                yield resp
        finally:
            with LOCK:
                STREAMS.remove(q)

    def StreamAggregatedResources(self, requests, context):
        yield from self.serve(requests, False)

    def DeltaAggregatedResources(self, requests, context):
        yield from self.serve(requests, True)


class Rtds(rtds_pb2_grpc.RuntimeDiscoveryServiceServicer):
    """RTDS on its own stream: the ADS streams' answers for the Runtime type."""

    def StreamRuntime(self, requests, context):
        yield from Ads().serve(requests, False)

    def DeltaRuntime(self, requests, context):
        yield from Ads().serve(requests, True)


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(Ads(), server)
    rtds_pb2_grpc.add_RuntimeDiscoveryServiceServicer_to_server(Rtds(), server)
    port = server.add_insecure_port(f"127.0.0.1:{sys.argv[1] if len(sys.argv) > 1 else 0}")
    server.start()
    print(f"PORT {port}", flush=True)
    # Ends when the test closes stdin (or kills the process).
    commands()
    server.stop(0)


if __name__ == "__main__":
    main()
