"""PID 1 of a sandbox (see rlbridge.engine.sandbox): runs as root inside fresh network, mount, PID,
IPC and UTS namespaces made by `unshare`, builds the sandbox's root file system, then runs the
program as an unprivileged user with rlimits and waits for it. When it exits, the kernel kills
every process left in the PID namespace and the mounts (the scratch tmpfs included) vanish with
the namespace.

Started as `python -I -S _sandbox_init.py` with a marshal-encoded job on stdin. It imports as
little as it can (marshal, not json; no runpy): each module costs milliseconds per execution.
"""

import ctypes
import marshal
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}[os.uname().machine]

libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    _check(
        libc.mount(
            src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
            ctypes.c_ulong(flags), data.encode() if data else None,
        ),
        f"mount {target}",
    )


def bind_ro(src, target):
    mount(src, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_root(job):
    new = "/tmp"  # a tmpfs mounted over /tmp in this mount namespace only
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in job["ro_paths"]:
        target = new + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
        elif os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
            bind_ro(path, target)
    os.makedirs(new + "/dev", exist_ok=True)
    for dev in ("null", "zero", "random", "urandom"):
        open(new + "/dev/" + dev, "w").close()
        mount("/dev/" + dev, new + "/dev/" + dev, None, MS_BIND)
    for d in ("/proc", "/tmp", "/old"):
        os.makedirs(new + d, exist_ok=True)
    # the scratch dir: a size-limited tmpfs, the only writable place
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={job['scratch_mb']}m,mode=1777")
    _check(libc.syscall(SYS_PIVOT_ROOT, new.encode(), (new + "/old").encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/old", MNT_DETACH), "umount old root")
    os.rmdir("/old")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def run_program(job, work):
    """The program, in this (forked, unprivileged) interpreter: a second interpreter start would
    cost more than the rest of the sandbox together."""
    del sys.path[:]
    sys.path.extend([work, *job["sys_path"]])
    sys.argv = [job["main"]]
    if job["site"]:
        import site

        site.main()
    main_module = type(sys)("__main__")
    main_module.__file__ = job["main"]
    sys.modules["__main__"] = main_module
    code = 0
    try:
        with open(job["main"], encoding="utf-8") as fh:
            source = fh.read()
        exec(compile(source, job["main"], "exec"), main_module.__dict__)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code & 0xFF)


def main():
    job = marshal.loads(sys.stdin.buffer.read())
    try:
        build_root(job)
        uid = job["uid"]
        work = "/tmp/scratch"
        os.mkdir(work, 0o700)
        for name, content in job["files"].items():
            path = os.path.join(work, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
            os.chown(path, uid, uid)
        os.chown(work, uid, uid)
    except Exception as exc:  # set-up failed: say so on the channel the host reads
        os.write(2, f"rlbridge-sandbox-setup-error: {exc}\n".encode())
        os._exit(125)
    null = os.open("/dev/null", os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(null, 0)
            os.setsid()
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            lim = job["limits"]
            # CPU: SIGXCPU at cpu_s (the outcome cpu_limit), SIGKILL a second later if caught
            resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
            for res, value in (
                (resource.RLIMIT_AS, lim["memory_mb"] * 2**20),
                (resource.RLIMIT_NPROC, lim["nproc"]),
                (resource.RLIMIT_FSIZE, lim["fsize_mb"] * 2**20),
                (resource.RLIMIT_NOFILE, lim["nofile"]),
                (resource.RLIMIT_CORE, 0),
            ):
                resource.setrlimit(res, (value, value))
            _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
            os.chdir(work)
            os.closerange(3, 1024)
            os.environ.clear()
            os.environ.update(job["env"])
        except BaseException as exc:
            os.write(2, f"rlbridge-sandbox-setup-error: {exc}\n".encode())
            os._exit(125)
        run_program(job, work)
    # PID 1: reap everything; when the program exits, leave (the kernel kills the rest)
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(125)
        if got == pid:
            os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":  # run as a script by the sandbox, never imported for effect
    main()
