#!/usr/bin/env python3
"""A kubelet pod-resources endpoint served by a real gRPC stack (Debian's
python3-grpcio), to check stoker watch's minimal HTTP/2 client against an
implementation it did not write: v1.PodResourcesLister/List on a unix
socket, answering a ListPodResourcesResponse encoded here by hand (no
generated code, no protobuf package).

  fake_kubelet.py SOCKET NS/POD/CONTAINER=RESOURCE:ID[,ID...] ...

Serves until killed; writes SOCKET.ready once listening."""
import sys
import time
from concurrent import futures

import grpc


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def answer(specs):
    msg = b""
    for spec in specs:
        who, _, devs = spec.partition("=")
        ns, pod, ctr = who.split("/")
        res, _, ids = devs.partition(":")
        dev = field(1, res.encode()) + b"".join(field(2, i.encode()) for i in ids.split(","))
        container = field(1, ctr.encode()) + field(2, dev)
        msg += field(1, field(1, pod.encode()) + field(2, ns.encode()) + field(3, container))
    return msg


def main():
    sock, specs = sys.argv[1], sys.argv[2:]
    body = answer(specs)
    calls = []

    def list_pods(request, context):
        calls.append(request)
        return body

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(list_pods, request_deserializer=None,
                                                      response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("unix:" + sock)
    server.start()
    open(sock + ".ready", "w").close()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
