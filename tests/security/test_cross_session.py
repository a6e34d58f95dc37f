"""Concurrent sessions on one host cannot see each other's files, sockets or processes (SECURITY.md section 0)."""

from __future__ import annotations

import json

from conftest import token


def test_concurrent_sessions_are_invisible_to_each_other(session_factory) -> None:
    first, second = session_factory(), session_factory()
    mark = token()
    setup = first.execute(f"""
import socket, subprocess
open('/tmp/{mark}', 'w').write('first only')
open('/workspace/{mark}', 'w').write('first only')
listener = socket.socket(socket.AF_UNIX)
listener.bind('/tmp/{mark}.sock')
listener.listen()
sleeper = subprocess.Popen(['sleep', '300', '{mark}'])
print(tools.echo('first'))
""")
    assert setup.stdout == "first\n", setup.text
    probe = second.execute(f"""
import json, os, socket
seen = {{"files": [p for p in ('/tmp/{mark}', '/workspace/{mark}', '/tmp/{mark}.sock') if os.path.exists(p)]}}
try:
    socket.socket(socket.AF_UNIX).connect('/tmp/{mark}.sock')
    seen["socket"] = "connected"
except OSError as error:
    seen["socket"] = type(error).__name__
seen["processes"] = [pid for pid in os.listdir('/proc') if pid.isdigit()
                     and '{mark}' in open(f'/proc/{{pid}}/cmdline', 'rb').read().decode(errors='replace')]
print(json.dumps(seen))
""")
    seen = json.loads(probe.stdout)
    assert seen == {"files": [], "socket": "FileNotFoundError", "processes": []}
    assert first.execute("sleeper.kill()\nprint(open('/tmp/" + mark + "').read())").stdout == "first only\n"
    # Neither audit trail holds the other's cells or calls.
    assert "first only" not in second.session.notebook_path.read_text()
    assert [c.tool for c in setup.calls] == ["echo"] and probe.calls == []
