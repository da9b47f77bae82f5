#!/usr/bin/env python3
# tcp_relay.py LISTEN_PORT TARGET_PORT — a plain TCP relay on loopback, for
# tests that freeze a client's network: SIGSTOP the relay and every byte
# stops both ways while the connections stay open.
import socket, sys, threading
lport, dport = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", lport)); s.listen(16)
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: pass
    for x in (a, b):
        try: x.close()
        except OSError: pass
while True:
    c, _ = s.accept()
    u = socket.create_connection(("127.0.0.1", dport))
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
