"""Clients and servers that more than one serving test module uses: a REST call, a
Prometheus sample, throw-away TLS certificates, and an in-process server."""

import datetime
import http.client
import json
import re
import threading
import urllib.error
import urllib.request

import grpc

from helpers import free_ports
from serving.__main__ import ServerFlags, run_server


def rest(port, method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request(method, path, None if body is None else json.dumps(body))
    response = connection.getresponse()
    return response.status, response.read(), dict(response.getheaders())


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample of a Prometheus text page (0 if absent)."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            sample_labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(sample_labels.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def certificates(tmp_path):
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def pem(item):
        if isinstance(item, x509.Certificate):
            return item.public_bytes(serialization.Encoding.PEM)
        return item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())

    def certificate(name, subject_key, issuer_name, issuer_key, ca=False, names=()):
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
                   .public_key(subject_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if names:
            import ipaddress
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]),
                critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key, client_key = key(), key(), key()
    ca = certificate("kerasbert test CA", ca_key, "kerasbert test CA", ca_key, ca=True)
    server = certificate("localhost", server_key, "kerasbert test CA", ca_key, names=("localhost", "127.0.0.1"))
    client = certificate("a client", client_key, "kerasbert test CA", ca_key)
    return {"ca": pem(ca), "server_key": pem(server_key), "server_cert": pem(server),
            "client_key": pem(client_key), "client_cert": pem(client)}


class Server:
    def __init__(self, **flags):
        self.grpc_port, self.rest_port = free_ports(2)
        self.flags = ServerFlags(port=self.grpc_port, rest_api_port=self.rest_port, **flags)
        self.ready, self.stop = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=run_server, args=(self.flags, self.ready, self.stop), daemon=True)
        self.thread.start()
        assert self.ready.wait(120), "server did not start"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")

    def url(self, path):
        return f"http://127.0.0.1:{self.rest_port}{path}"

    def request(self, path, body=None, method=None):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url(path), data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read()), response.headers["Content-Type"]
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read()), error.headers["Content-Type"]

    def close(self):
        self.stop.set()
        self.thread.join(30)
