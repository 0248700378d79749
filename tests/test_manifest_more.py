"""More file-system changes between builds, run through test_manifest_corpus's check (each
build's CUBIN against an uncached compile): folders reached through links, folders renamed
over folders, chains of links, a header edited in place while NVRTC runs."""

from __future__ import annotations

import pytest

from tests import test_manifest_corpus as corpus
from tests.test_manifest_corpus import Case

V1, V2 = "#define V 1\n", "#define V 2\n"


def _more() -> dict[str, Case]:
    angle = "#include <v.h>\n"
    sub = '#include "sub/v.h"\n'
    return {
        "-I of a symbolic link to a folder, retargeted": Case(
            (("write", "a/v.h", V1), ("write", "b/v.h", V2), ("symlink", "inc", "a")),
            angle, ("-Iinc",), (("rm", "inc"), ("symlink", "inc", "b"))),
        "-I folder renamed away and another renamed over it": Case(
            (("write", "inc/v.h", V1), ("write", "other/v.h", V2)), angle, ("-Iinc",),
            (("rename", "inc", "old"), ("rename", "other", "inc"))),
        "a header's folder, reached through a link, retargeted": Case(
            (("write", "a/v.h", V1), ("write", "b/v.h", V2), ("symlink", "sub", "a")), sub, (),
            (("rm", "sub"), ("symlink", "sub", "b"))),
        "a header's folder renamed over by another": Case(
            (("write", "sub/v.h", V1), ("write", "b/v.h", V2)), sub, (),
            (("rename", "sub", "old"), ("rename", "b", "sub"))),
        "the middle link of a chain retargeted": Case(
            (("write", "r1.h", V1), ("write", "r2.h", V2), ("symlink", "l2.h", "r1.h"),
             ("symlink", "v.h", "l2.h")), '#include "v.h"\n', (),
            (("rm", "l2.h"), ("symlink", "l2.h", "r2.h"))),
        "a link chain's end replaced by a real header": Case(
            (("write", "r1.h", V1), ("symlink", "l2.h", "r1.h"), ("symlink", "v.h", "l2.h")),
            '#include "v.h"\n', (), (("rm", "l2.h"), ("write", "l2.h", V2))),
        "-I folder that was missing is created with the header": Case(
            (("write", "inc2/v.h", V1),), angle, ("-Iinc1", "-Iinc2"),
            (("write", "inc1/v.h", V2),)),
        "a header edited in place during the compile": Case(
            (("write", "v.h", V1),), '#include "v.h"\n', (),
            during=(("write", "v.h", V2),)),
        "a header name differing only in case appears": Case(
            (("write", "inc2/v.h", V1), ("mkdir", "inc1")), angle, ("-Iinc1", "-Iinc2"),
            (("write", "inc1/V.h", V2),)),
    }


MORE = _more()


@pytest.mark.parametrize("label", list(MORE))
def test_more_changes_serve_what_an_uncached_compile_makes(label, tmp_path, cache,
                                                            monkeypatch):
    monkeypatch.setitem(corpus.CORPUS, label, MORE[label])
    corpus.test_each_change_serves_what_an_uncached_compile_makes(label, tmp_path, cache,
                                                                  monkeypatch)
