#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tcp_relay.py LISTEN_PORT TARGET_PORT [LISTEN_PORT TARGET_PORT...] — plain
# TCP relays on loopback, for tests that freeze a network link: SIGSTOP the
# relay and every byte stops both ways, on every pair, while the
# connections stay open.
import socket, sys, threading
args = [int(a) for a in sys.argv[1:]]
if len(args) < 2 or len(args) % 2:
    sys.exit("usage: tcp_relay.py LISTEN_PORT TARGET_PORT [LISTEN_PORT TARGET_PORT...]")
def pipe(a, b, done):
    ends = ((b, socket.SHUT_WR),) # an end of stream goes on as one
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: # a reset: both ways end
        ends = ((a, socket.SHUT_RDWR), (b, socket.SHUT_RDWR))
    # The other direction's thread may still be in b.recv or a.sendall: a
    # shutdown wakes it or passes the end on, and only the last of the two
    # closes. (Closing here freed the numbers while that thread still used
    # them: a new connection's socket took one, and the old thread read the
    # new connection's bytes and dropped them.)
    for x, how in ends:
        try: x.shutdown(how)
        except OSError: pass
    with done[0]:
        done[1] += 1
        last = done[1] == 2
    if last:
        for x in (a, b):
            x.close()
def serve(s, dport):
    while True:
        c, _ = s.accept()
        try:
            u = socket.create_connection(("127.0.0.1", dport))
        except OSError:
            c.close() # the target is down: as if it refused
            continue
        for x in (c, u): # no Nagle delay: the relay must not slow a protocol
            x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        done = [threading.Lock(), 0]
        threading.Thread(target=pipe, args=(c, u, done), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c, done), daemon=True).start()
listeners = []
for lport, dport in zip(args[::2], args[1::2]):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", lport)); s.listen(16)
    listeners.append((s, dport))
for s, dport in listeners[1:]:
    threading.Thread(target=serve, args=(s, dport), daemon=True).start()
serve(*listeners[0])
