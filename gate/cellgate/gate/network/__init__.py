"""The network as gated calls: each HTTP(S) request a cell's own client makes is one gated call ``http``.

The sandbox has no network device. Its clients find a proxy at an endpoint inside the sandbox (the kernel's
tunnel, ``cellgate.kernel.tunnel``) that carries each connection's bytes over the kernel's channel to the host;
here the host terminates TLS with the session's CA (``certs``), decides each request by ``[[network.allow]]``
(``rules``), resolves and checks the address itself (``addresses``), adds credentials on the host, and records
the request as a call through the dispatcher (``proxy``, ``exchange``).
"""
