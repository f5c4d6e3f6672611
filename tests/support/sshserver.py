"""An SSH + SFTP server in this process, on 127.0.0.1, for tests of what leasewise does over SSH
(`move_state`, `host check`, image checksums): public-key auth for one client key, SFTP rooted at a
directory, `date +%s` answered with an optional clock skew, and a file's `sha256sum` (the real one, on the
file under the root)."""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko


class _RootedSFTP(paramiko.SFTPServerInterface):
    """Serves one directory as `/` (the real `/` when no root is given)."""

    def __init__(self, server, root: str):
        super().__init__(server)
        self.root = root

    def _real(self, path: str) -> str:
        return os.path.join(self.root, posixpath.normpath("/" + path).lstrip("/"))

    def _attempt(self, action):
        try:
            return action()
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)

    def stat(self, path):
        return self._attempt(lambda: paramiko.SFTPAttributes.from_stat(os.stat(self._real(path))))

    lstat = stat

    def open(self, path, flags, attr):
        def opened():
            fd = os.open(self._real(path), flags | getattr(os, "O_BINARY", 0), 0o600)
            writing = flags & (os.O_WRONLY | os.O_RDWR)
            handle = paramiko.SFTPHandle(flags)
            handle.filename = path
            handle.readfile = handle.writefile = os.fdopen(fd, "r+b" if flags & os.O_RDWR else ("wb" if writing else "rb"))
            return handle

        return self._attempt(opened)

    def remove(self, path):
        return self._attempt(lambda: os.remove(self._real(path)) or paramiko.SFTP_OK)

    def posix_rename(self, oldpath, newpath):
        return self._attempt(lambda: os.replace(self._real(oldpath), self._real(newpath)) or paramiko.SFTP_OK)

    rename = posix_rename


#: the one shell command the server runs besides `date +%s`: a file's checksum (drivers/libvirt/image_copy.py)
_CHECKSUM = re.compile(r"test -e (.+?) \|\| exit 0; sha256sum -- \1")


class _KeyServer(paramiko.ServerInterface):
    def __init__(self, owner: "SSHServer"):
        self.owner = owner

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = key.asbytes() == self.owner.client_key.asbytes()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        checksum = _CHECKSUM.fullmatch(command.decode(errors="replace"))
        if checksum is not None and self.owner.root is not None:
            # (the driver's checksum of an image on the host: the real sha256sum, run on the file under root)
            path = shlex.split(checksum.group(1))[0]
            real = self.owner.root / path.lstrip("/")

            def reply():
                if real.exists():
                    done = subprocess.run(["sha256sum", "--", str(real)], capture_output=True)
                    channel.sendall(done.stdout.replace(str(real).encode(), path.encode()))
                    channel.sendall_stderr(done.stderr)
                    channel.send_exit_status(done.returncode)
                else:
                    channel.send_exit_status(0)
                channel.close()

            threading.Timer(0.05, reply).start()
            return True
        if command != b"date +%s":
            return False

        def reply():
            channel.sendall(f"{int(time.time() + self.owner.skew)}\n".encode())
            channel.send_exit_status(0)
            channel.close()

        threading.Timer(0.05, reply).start()
        return True


class SSHServer:
    """Accepts connections in a thread until `close()`."""

    def __init__(self, client_key: paramiko.PKey, host_key: paramiko.PKey | None = None,
                 root: Path | None = None, skew: float = 0.0):
        self.client_key = client_key
        self.host_key = host_key if host_key is not None else paramiko.ECDSAKey.generate()
        self.root = root
        self.skew = skew
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.transports: list[paramiko.Transport] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            self.transports.append(transport)
            transport.add_server_key(self.host_key)
            transport.set_subsystem_handler("sftp", paramiko.SFTPServer, _RootedSFTP,
                                            root=str(self.root) if self.root is not None else "/")
            try:
                transport.start_server(server=_KeyServer(self))
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()  # the client hung up mid-handshake (e.g. it rejected our host key)

    def close(self):
        self.sock.close()
        for transport in self.transports:
            transport.close()
