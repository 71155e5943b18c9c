"""A real POP3 and IMAP server for the mailbox tests: Dovecot run in the foreground on loopback ports.

``DovecotServer`` writes a self-contained configuration (its own base_dir, state_dir and log, a
passwd-file user database, a maildir) into a fresh directory and runs ``dovecot -F -c <conf>``
as a child process, so nothing of the system's Dovecot setup is used or touched. It listens on
free loopback ports: POP3 (plain, STLS offered) and POP3S, and with ``imap=True`` also IMAP
(STARTTLS offered) and IMAPS; a self-signed certificate for 127.0.0.1/localhost is generated
with ``openssl`` (``cert_path`` is the CA to trust). ``tls=False`` runs it without TLS at all
(no POP3S/IMAPS, no STLS/STARTTLS offered): the server a client must refuse to log in to.
``rawlog=True`` makes Dovecot write every IMAP session's client commands to ``rawlog/*.in``
(``imap_commands()`` reads them back), which is how the tests count FETCH commands: on the
server, not inside the code under test. ``capabilities`` replaces the IMAP capabilities Dovecot
announces after the login (``imap_capability``): a server without CONDSTORE, to a client.

Dovecot refuses to run mail processes as root and its login processes must not be root, so
when the tests run as root the mail user is ``nobody`` and the login user ``dovenull`` (created
by dovecot-core) or ``nobody``; the working directory is then created outside pytest's
private tmp (which is 0700) and the maildir is chowned to the mail user. As a normal user,
everything runs as that user (Dovecot's rootless mode).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REQUIRE_ENV = "AECS_REQUIRE_DOVECOT"
#: What Dovecot 2.3 announces after the login, less CONDSTORE and QRESYNC (``capabilities=``):
#: a server without them, to a client
NO_CONDSTORE = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT SORT=DISPLAY THREAD=REFERENCES THREAD=REFS"
    " THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN NAMESPACE UIDPLUS"
    " LIST-EXTENDED I18NLEVEL=1 ESEARCH ESORT SEARCHRES WITHIN CONTEXT=SEARCH LIST-STATUS BINARY MOVE"
    " LITERAL+"
)


#: Where Dovecot's service programs are (Debian: /usr/lib/dovecot), and the Debian package that
#: has each service a test server starts (``DovecotServer``: POP3 always, IMAP with ``imap=True``)
LIBEXEC_DIRS = ("/usr/lib/dovecot", "/usr/libexec/dovecot")
SERVICE_PACKAGES = {"pop3": "dovecot-pop3d", "imap": "dovecot-imapd"}


def missing_services(imap: bool) -> list[tuple[str, str]]:
    """What a ``DovecotServer(imap=imap)`` starts that this machine lacks, as ``(what, how to get
    it)``: the ``dovecot`` program, and each service's program (``/usr/lib/dovecot/pop3``...):
    a machine with dovecot-imapd but not dovecot-pop3d starts no server (``service(pop3)
    access(/usr/lib/dovecot/pop3) failed``)."""
    lacking = []
    if dovecot_binary() is None:
        lacking.append(("dovecot", "install dovecot-core"))
    for service in ("pop3", "imap") if imap else ("pop3",):
        if not any(os.access(Path(d, service), os.X_OK) for d in LIBEXEC_DIRS):
            lacking.append((f"{LIBEXEC_DIRS[0]}/{service}", f"install {SERVICE_PACKAGES[service]}"))
    return lacking


def dovecot_binary() -> str | None:
    return shutil.which("dovecot") or next(
        (p for p in ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot") if os.access(p, os.X_OK)), None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class DovecotServer:
    """One Dovecot instance with one POP3 user (``user``/``password``) and its maildir."""

    user = "alice"
    password = "s3cret pass"

    def __init__(
        self,
        binary: str,
        *,
        imap: bool = False,
        tls: bool = True,
        rawlog: bool = False,
        capabilities: str | None = None,
    ) -> None:
        self.binary = binary
        self.capabilities = capabilities
        self.imap = imap
        self.tls = tls
        self.root = Path(tempfile.mkdtemp(prefix="aecs-dovecot-"))
        self.root.chmod(0o755)
        self.maildir = self.root / "home" / "Maildir"
        for sub in ("new", "cur", "tmp"):
            (self.maildir / sub).mkdir(parents=True)
        self.pop3_port = free_port()
        self.pop3s_port = free_port()
        self.imap_port = free_port()
        self.imaps_port = free_port()
        self.rawlog_dir = (self.root / "rawlog") if rawlog else None
        if self.rawlog_dir is not None:
            self.rawlog_dir.mkdir()
        self.cert_path = self.root / "cert.pem"
        self.log_path = self.root / "dovecot.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._counter = 0
        if os.geteuid() == 0:
            mail = pwd.getpwnam("nobody")
            self.mail_uid, self.mail_gid = mail.pw_uid, mail.pw_gid
            login = "dovenull" if _user_exists("dovenull") else "nobody"
            internal = "dovecot" if _user_exists("dovecot") else "root"
        else:
            me = pwd.getpwuid(os.geteuid())
            self.mail_uid, self.mail_gid = me.pw_uid, me.pw_gid
            login = internal = me.pw_name
        self._make_cert()
        (self.root / "passwd").write_text(f"{self.user}:{{PLAIN}}{self.password}::::::\n")
        (self.root / "passwd").chmod(0o644)
        self.conf_path = self.root / "dovecot.conf"
        self.conf_path.write_text(self._config(login, internal))
        self._chown_maildir()

    def _make_cert(self) -> None:
        key = self.root / "key.pem"
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", str(key), "-out", str(self.cert_path), "-days", "2",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        key.chmod(0o644)

    def _config(self, login_user: str, internal_user: str) -> str:
        r = self.root
        protocols = "pop3 imap" if self.imap else "pop3"
        tls = f"ssl = yes\nssl_cert = <{self.cert_path}\nssl_key = <{r}/key.pem" if self.tls else "ssl = no"
        secure = "yes" if self.tls else "no"
        imap_listeners = (
            f"""
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {self.imaps_port if self.tls else 0}
    ssl = {secure}
  }}"""
            if self.imap
            else """
  inet_listener imap {
    port = 0
  }
  inet_listener imaps {
    port = 0
  }"""
        )
        rawlog = f"rawlog_dir = {self.rawlog_dir}" if self.rawlog_dir is not None else ""
        if self.capabilities is not None:
            rawlog += f"\nimap_capability = {self.capabilities}"
        return f"""
base_dir = {r}/run
state_dir = {r}/state
log_path = {self.log_path}
protocols = {protocols}
listen = 127.0.0.1
{tls}
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
login_trusted_networks = 127.0.0.0/8
default_internal_user = {internal_user}
default_login_user = {login_user}
first_valid_uid = 1
mail_location = maildir:{self.maildir}
{rawlog}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN {r}/passwd
}}
userdb {{
  driver = static
  args = uid={self.mail_uid} gid={self.mail_gid} home={r}/home
}}
service pop3-login {{
  inet_listener pop3 {{
    address = 127.0.0.1
    port = {self.pop3_port}
  }}
  inet_listener pop3s {{
    address = 127.0.0.1
    port = {self.pop3s_port if self.tls else 0}
    ssl = {secure}
  }}
}}
service anvil {{
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
service imap-login {{{imap_listeners}
}}
"""

    def _chown_maildir(self) -> None:
        if os.geteuid() != 0:
            return
        paths = [self.root / "home", *(self.root / "home").rglob("*")]
        if self.rawlog_dir is not None:
            paths += [self.rawlog_dir, *self.rawlog_dir.iterdir()]
        for path in paths:
            os.chown(path, self.mail_uid, self.mail_gid)

    def ports(self) -> list[int]:
        """The ports Dovecot listens on."""
        ports = [self.pop3_port] + ([self.pop3s_port] if self.tls else [])
        if self.imap:
            ports += [self.imap_port] + ([self.imaps_port] if self.tls else [])
        return ports

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "-F", "-c", str(self.conf_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"dovecot exited with {self.proc.returncode}: {err}\n{self.log()}")
            if all(_accepts(p) for p in self.ports()):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"dovecot did not listen within {timeout}s\n{self.log()}")

    def stop(self) -> None:
        """Stop Dovecot and every process it started (its own process group)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- the maildir --------------------------------------------------------------------------

    def deliver(self, raw: bytes) -> str:
        """Put one message into ``new/``; returns its maildir base name (stable across flags)."""
        self._counter += 1
        name = f"1700000000.M{self._counter:06d}P{os.getpid()}.aecs-test"
        path = self.maildir / "new" / name
        path.write_bytes(raw)
        if os.geteuid() == 0:
            os.chown(path, self.mail_uid, self.mail_gid)
        return name

    def deliver_to(self, folder: str, raw: bytes) -> str:
        """Put one message into a folder's ``new/`` (Maildir++: ``.<folder>``; the folder name as
        the server names it, modified UTF-7); the folder is created when missing."""
        base = self.maildir if folder == "INBOX" else self.maildir / f".{folder}"
        for sub in ("new", "cur", "tmp"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        self._counter += 1
        name = f"1700000000.M{self._counter:06d}P{os.getpid()}.aecs-test"
        path = base / "new" / name
        path.write_bytes(raw)
        if os.geteuid() == 0:
            for owned in (base, *(base / sub for sub in ("new", "cur", "tmp")), path):
                os.chown(owned, self.mail_uid, self.mail_gid)
        return name

    def reset_mail(self) -> None:
        """An empty account: every folder and the INBOX's messages and Dovecot's index files
        removed (UIDVALIDITY records included), as if new."""
        for path in self.maildir.iterdir():
            if path.is_dir() and path.name.startswith("."):
                shutil.rmtree(path)
            elif path.is_dir():
                for entry in path.iterdir():
                    entry.unlink()
            else:
                path.unlink()
        if self.rawlog_dir is not None:
            for entry in self.rawlog_dir.iterdir():
                entry.unlink()

    def clear_rawlog(self) -> None:
        assert self.rawlog_dir is not None, "start the server with rawlog=True"
        for entry in self.rawlog_dir.iterdir():
            entry.unlink()

    def imap_commands(self, timeout: float = 5.0) -> list[str]:
        """Every command line the IMAP clients sent since the last ``clear_rawlog`` (from
        Dovecot's rawlog; the login itself happens before the rawlog starts), tag removed, in the
        order of the sessions. Waits (up to ``timeout``) for Dovecot to finish writing sessions
        that logged out."""
        assert self.rawlog_dir is not None, "start the server with rawlog=True"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_logging_out(path) for path in self.rawlog_dir.glob("*.in")):
            time.sleep(0.05)
        lines: list[str] = []
        for path in sorted(self.rawlog_dir.glob("*.in"), key=lambda p: p.name):
            for line in path.read_bytes().split(b"\r\n"):
                parts = line.decode("latin-1").split(" ", 2)  # timestamp, tag, command
                if len(parts) == 3 and parts[0].replace(".", "").isdigit():
                    lines.append(parts[2])
        return lines

    def session_pids(self, process: str = "imap") -> list[int]:
        """PIDs of Dovecot's ``process`` children (one ``imap`` process serves one logged-in
        session): found in /proc by the process group of the Dovecot this object started."""
        assert self.proc is not None
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                comm = stat.read_text().split("(", 1)[1].rsplit(")", 1)[0]
            except (OSError, IndexError):
                continue
            if int(fields[2]) == self.proc.pid and comm == process:
                found.append(int(stat.parent.name))
        return found

    def messages(self) -> dict[str, bytes]:
        """Every message still in the maildir, by base name (Dovecot moves new/ to cur/:2,S)."""
        found = {}
        for sub in ("new", "cur"):
            for path in (self.maildir / sub).iterdir():
                found[path.name.split(":", 1)[0]] = path.read_bytes()
        return found


def _logging_out(rawlog_in: Path) -> bool:
    """A session that sent LOGOUT but whose rawlog does not show the answer yet."""
    out = rawlog_in.with_suffix(".out")
    if not out.exists() or b"LOGOUT" not in rawlog_in.read_bytes():
        return False
    return b" OK Logout completed" not in out.read_bytes()[-200:]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
