"""A worker process that judges file contents for the secrets policy (:meth:`SecretsPolicy.prejudge`).

One request frame (:mod:`engine.frames`) on stdin — the policy's extra globs and patterns, then
``[(project-relative path, text)]`` — and one reply on stdout: each file's
:meth:`~engine.secrets.SecretsPolicy.content_rule` (a rule, or None), in order. A plain
subprocess, as the parse worker (:mod:`engine.index.parse_worker` says why).
"""

from __future__ import annotations

import sys


def main() -> int:
    from .frames import read_frame, write_frame
    from .secrets import SecretsPolicy

    request = read_frame(sys.stdin.buffer)
    if request is None:
        return 1
    (globs, patterns), items = request
    policy = SecretsPolicy(extra_globs=globs, extra_patterns=patterns)
    write_frame(sys.stdout.buffer, [policy.content_rule(text, rel) for rel, text in items])
    return 0


if __name__ == "__main__":
    sys.exit(main())
