"""The one hardened read (cudamagic.core.files): every kind of non-file refused at once, links only
where asked, the size bound from fstat, the trust check on the descriptor."""

from __future__ import annotations

import os
import re
import socket
import stat
import time

import pytest

from cudamagic.core.files import NotAFile, TooLarge, Untrusted, open_regular, read_fd, read_regular


def _fifo(p):
    os.mkfifo(p)


def _socket(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    return s


def _link_to_file(p):
    (p.parent / "target").write_bytes(b"x")
    os.symlink(p.parent / "target", p)


def _dangling(p):
    os.symlink(p.parent / "nowhere", p)


def _folder(p):
    p.mkdir()


# (what is at the path, follow_links, the kind refused; None: it reads)
CASES = [
    (_fifo, False, "a FIFO"), (_fifo, True, "a FIFO"),
    (_socket, False, None), (_folder, False, "a folder"), (_folder, True, "a folder"),
    (_link_to_file, False, "a symbolic link"), (_link_to_file, True, None),
]


@pytest.mark.parametrize("make, follow, kind", CASES)
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path, make, follow, kind):
    path = tmp_path / "f"
    keep = make(path)
    started = time.monotonic()
    if make is _socket:  # a socket cannot be opened at all: an OSError, not a hang
        with pytest.raises(OSError):
            read_regular(path, max_size=10, follow_links=follow)
    elif kind is None:
        assert read_regular(path, max_size=10, follow_links=follow) == b"x"
    else:
        with pytest.raises(NotAFile) as info:
            read_regular(path, max_size=10, follow_links=follow)
        assert info.value.kind == kind and str(path) in str(info.value)
    assert time.monotonic() - started < 5  # a FIFO opened for reading would wait forever
    if keep is not None:
        keep.close()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(device):
    with pytest.raises(NotAFile, match="a device"):
        read_regular(device, max_size=1 << 20, follow_links=True)


def test_a_dangling_link_is_refused_or_gone(tmp_path):
    _dangling(tmp_path / "f")
    with pytest.raises(NotAFile, match="symbolic link"):
        read_regular(tmp_path / "f", max_size=10)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "f", max_size=10, follow_links=True)


@pytest.mark.parametrize("size, limit, ok", [(0, 0, True), (10, 10, True), (11, 10, False),
                                             (1 << 20, (1 << 20) - 1, False)])
def test_the_size_bound(tmp_path, size, limit, ok):
    path = tmp_path / "f"
    path.write_bytes(b"a" * size)
    if ok:
        assert read_regular(path, max_size=limit) == b"a" * size
    else:
        with pytest.raises(TooLarge) as info:
            read_regular(path, max_size=limit)
        assert (info.value.size, info.value.limit) == (size, limit)


def test_trust_sees_the_descriptor_and_its_refusal_closes_it(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    os.chmod(path, 0o666)
    before = len(os.listdir("/proc/self/fd"))
    why = lambda st: "is writable by others" if st.st_mode & stat.S_IWOTH else None  # noqa: E731
    for _ in range(50):
        with pytest.raises(Untrusted, match="writable by others"):
            read_regular(path, max_size=10, trust=why)
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor leaked per refusal
    os.chmod(path, 0o600)
    assert read_regular(path, max_size=10, trust=why) == b"abc"


def test_a_file_that_grows_after_fstat_is_read_to_its_size_only(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"1234")
    fd, size = open_regular(path, max_size=4)
    with open(path, "ab") as f:
        f.write(b"5678")
    assert read_fd(fd, size) == b"1234"


@pytest.mark.parametrize("make, said", [(_folder, "is a folder, not a CUBIN file"),
                                        (_fifo, "is not a regular file (a FIFO")])
def test_load_cubin_tells_a_folder_from_other_files_by_its_mode_not_its_words(
        tmp_path, monkeypatch, make, said):
    """A folder given to load_cubin says so; a FIFO says it is no regular file. Told apart by
    the file's type, so rewording what files.py calls each kind changes nothing."""
    import cudamagic
    from cudamagic.core import files
    from cudamagic.errors import ImageError

    monkeypatch.setattr(files, "_KINDS", tuple((test, f"kind {i}")
                                               for i, (test, _) in enumerate(files._KINDS)))
    path = tmp_path / "m.cubin"
    keep = make(path)
    with pytest.raises(ImageError, match=re.escape(said)):
        cudamagic.load_cubin(path)
    if keep is not None:
        keep.close()
