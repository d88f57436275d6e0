"""A small, bounded reader of launch shell scripts: variables, arrays and arithmetic resolved, nothing run.

Launch scripts (Megatron-LM's ``examples/``, Megatron-DeepSpeed's, the ModelZoo's) build the command line
out of variables (``TP=8``, ``${VAR:-default}``), arrays (``GPT_MODEL_ARGS=( ... )``, ``+=``), arithmetic
(``$(($GPUS_PER_NODE*$NUM_NODES))``) and simple ``if [[ "$X" == "fp8" ]]`` blocks. :func:`run` walks the
script's statements in order and keeps the variables; every command it meets is recorded with its words
expanded (:class:`Command`). It never executes anything: a command substitution ``$(...)`` or backquotes,
``source`` of another file, a loop or a function body are left unresolved and noted (:attr:`Script.notes`).

Bounds: the text is at most :data:`MAX_SCRIPT_BYTES`; the walk stops with an :class:`InputError` after
:data:`MAX_STEPS` expansion steps or when a value grows past :data:`MAX_VALUE_CHARS` (no hang on a
self-doubling variable); ``bash -c`` strings are read at most :data:`MAX_DEPTH` levels deep; arithmetic
refuses exponents and operands that would make huge integers.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

from plan_search.models.io import InputError

MAX_SCRIPT_BYTES = 1_000_000
MAX_STEPS = 200_000
MAX_VALUE_CHARS = 200_000
MAX_DEPTH = 3
MAX_INT_BITS = 256

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Word:
    """One word of a command after expansion: its text and the script line it was written on (for an array
    element, the element's line). ``unresolved``: the names of variables or substitutions it could not
    resolve (the text keeps them as ``${NAME}``)."""

    text: str
    line: int
    unresolved: tuple[str, ...] = ()


@dataclass
class Command:
    words: list[Word]
    line: int
    env: dict[str, str] = field(default_factory=dict)  # VAR=value prefixes of the command


@dataclass
class Script:
    vars: dict[str, object]
    commands: list[Command]
    notes: list[tuple[int, str]]  # (line, what was not evaluated)
    comments: list[tuple[int, str]]  # (line, text) of every comment (#SBATCH directives among them)


class _Budget:
    def __init__(self) -> None:
        self.steps = 0

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > MAX_STEPS:
            raise InputError(f"script: more than {MAX_STEPS} expansion steps; the script is not a launch file "
                             "this reader can resolve")


# ------------------------------------------------------------------ lexer

@dataclass
class _Tok:
    kind: str  # word | op | array | nl
    text: str
    line: int
    items: list[tuple[str, int]] | None = None  # array elements (raw text, line)


_OPS = ("&&", "||", ";;", ";", "|", "&", "(", ")", "{", "}")


def _scan_word(s: str, i: int, line: int) -> tuple[str, int, int]:
    """One raw word from ``s[i]`` (quotes, ``$( )``, ``${ }``, ``$(( ))`` and backquotes kept whole):
    (text, next index, line after it)."""
    start = i
    n = len(s)
    while i < n:
        c = s[i]
        if c in " \t\n;|&<>" or (c in "()" and i == start) or c == ")":
            if c == "(" and i == start:
                break
            break
        if c == "\\" and i + 1 < n:
            if s[i + 1] == "\n":
                line += 1
            i += 2
            continue
        if c == "'":
            j = s.find("'", i + 1)
            if j < 0:
                raise InputError(f"script: line {line}: a single quote is not closed")
            line += s.count("\n", i, j)
            i = j + 1
            continue
        if c == '"':
            j = i + 1
            while j < n and s[j] != '"':
                if s[j] == "\\":
                    j += 1
                elif s[j] == "$" and j + 1 < n and s[j + 1] in "({":
                    j = _skip_group(s, j + 1, line) - 1
                j += 1
            if j >= n:
                raise InputError(f"script: line {line}: a double quote is not closed")
            line += s.count("\n", i, j)
            i = j + 1
            continue
        if c == "`":
            j = s.find("`", i + 1)
            if j < 0:
                raise InputError(f"script: line {line}: a backquote is not closed")
            line += s.count("\n", i, j)
            i = j + 1
            continue
        if c == "$" and i + 1 < n and s[i + 1] in "({":
            j = _skip_group(s, i + 1, line)
            line += s.count("\n", i, j)
            i = j
            continue
        if c == "(" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=", s[start:i]):
            break  # NAME=( an array: the caller reads it
        if c == "(" and i > start:  # a ( inside a word ends nothing
            j = _skip_group(s, i, line)
            line += s.count("\n", i, j)
            i = j
            continue
        i += 1
    return s[start:i], i, line


def _skip_group(s: str, i: int, line: int) -> int:
    """Index after the bracket group opening at ``s[i]`` (``(`` or ``{``), quotes respected."""
    open_c = s[i]
    close_c = ")" if open_c == "(" else "}"
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and open_c == "(":
            k = s.find("'", j + 1)
            j = (k if k >= 0 else n) + 1
            continue
        if c == '"':
            k = j + 1
            while k < n and s[k] != '"':
                k += 2 if s[k] == "\\" else 1
            j = k + 1
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise InputError(f"script: line {line}: a {open_c!r} is not closed")


def lex(s: str, line: int = 1) -> tuple[list[_Tok], list[tuple[int, str]]]:
    """Tokens of a script and its comments."""
    toks: list[_Tok] = []
    comments: list[tuple[int, str]] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "\n":
            toks.append(_Tok("nl", "\n", line))
            line += 1
            i += 1
            continue
        if c == "#":
            j = s.find("\n", i)
            j = n if j < 0 else j
            comments.append((line, s[i + 1:j].strip()))
            i = j
            continue
        if c in "<>":  # redirections: the operator and its target are dropped
            j = i + 1
            while j < n and s[j] in "<>&-":
                j += 1
            if s.startswith("<<", i):  # here-document: skip its body
                m = re.match(r"<<-?\s*['\"]?([A-Za-z_0-9]+)['\"]?", s[i:])
                if m:
                    tag = m.group(1)
                    body_start = s.find("\n", i)
                    if body_start < 0:
                        i = n
                        continue
                    k = body_start + 1
                    end = re.compile(rf"^\s*{re.escape(tag)}\s*$", re.M).search(s, k)
                    stop = end.end() if end else n  # the rest of the << line (e.g. > file) goes with the body
                    line_end = line + s.count("\n", i, stop)
                    toks.append(_Tok("word", "<heredoc>", line))
                    toks[-1].items = [(s[k:end.start() if end else n], line + 1)]
                    i = stop
                    line = line_end
                    continue
            while j < n and s[j] in " \t":
                j += 1
            if j < n and s[j] not in "\n;|&":
                _, j, line = _scan_word(s, j, line)
            i = j
            continue
        two = s[i:i + 2]
        if two in ("&&", "||", ";;"):
            toks.append(_Tok("op", two, line))
            i += 2
            continue
        if c in ";|&(){}" and not (c in "{}" and i + 1 < n and s[i + 1] not in " \t\n;")  and not (
                c == "}" and i > 0 and s[i - 1] not in " \t\n;"):
            if c == "(" and s.startswith("((", i):  # (( arithmetic command )): one word
                j = _skip_group(s, i, line)
                toks.append(_Tok("word", "$" + s[i:j], line))
                i = j
                continue
            toks.append(_Tok("op", c, line))
            i += 1
            continue
        word, j, line2 = _scan_word(s, i, line)
        if j == i:  # a lone character the word scanner does not take
            toks.append(_Tok("op", c, line))
            i += 1
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(\+?=)", word)
        if m and j < n and s[j] == "(":
            end = _skip_group(s, j, line2)
            inner = s[j + 1:end - 1]
            sub, sub_comments = lex(inner, line2)
            comments += sub_comments
            items = [(t.text, t.line) for t in sub if t.kind == "word"]
            toks.append(_Tok("array", m.group(1) + m.group(2), line, items))
            line2 += s.count("\n", j, end)
            i = end
            line = line2
            continue
        toks.append(_Tok("word", word, line))
        i, line = j, line2
    return toks, comments


# ------------------------------------------------------------------ arithmetic

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: None, ast.Div: None,
        ast.FloorDiv: None, ast.Pow: None, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
        ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}


def arith(expr: str, lookup, line: int) -> int:
    """The value of a shell arithmetic expression (integers; names looked up, unset names are 0)."""
    text = expr.replace("&&", " and ").replace("||", " or ").replace("!=", "\0").replace("!", " not ").replace(
        "\0", "!=")
    text = re.sub(r"(?<![<>=!])/(?!/)", "//", text)
    try:
        tree = ast.parse(text.strip() or "0", mode="eval")
    except SyntaxError:
        raise InputError(f"script: line {line}: $(({expr.strip()})) is not arithmetic this reader evaluates") from None

    def ev(node) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            v = lookup(node.id)
            if v is None or v == "":
                return 0
            try:
                return int(str(v).strip(), 0)
            except ValueError:
                raise InputError(f"script: line {line}: ${node.id} is {str(v)[:40]!r}, not an integer, in "
                                 f"$(({expr.strip()}))") from None
        if isinstance(node, ast.UnaryOp):
            x = ev(node.operand)
            return {ast.USub: -x, ast.UAdd: x, ast.Not: int(not x), ast.Invert: ~x}[type(node.op)]
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return int(all(vals) if isinstance(node.op, ast.And) else any(vals))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
            return int(_CMP[type(node.ops[0])](ev(node.left), ev(node.comparators[0])))
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            a, b = ev(node.left), ev(node.right)
            op = type(node.op)
            if op in (ast.FloorDiv, ast.Div, ast.Mod):
                if b == 0:
                    raise InputError(f"script: line {line}: division by zero in $(({expr.strip()}))")
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C: towards zero
                r = q if op != ast.Mod else a - q * b
            elif op == ast.Pow:
                if b < 0 or b * max(abs(a), 2).bit_length() > MAX_INT_BITS:
                    raise InputError(f"script: line {line}: {a}**{b} in $(({expr.strip()})) is out of range")
                r = a ** b
            elif op == ast.LShift:
                if b < 0 or b > MAX_INT_BITS:
                    raise InputError(f"script: line {line}: shift by {b} is out of range")
                r = a << b
            else:
                r = _BIN[op](a, b)
            if abs(r).bit_length() > MAX_INT_BITS:
                raise InputError(f"script: line {line}: $(({expr.strip()})) is out of range")
            return r
        raise InputError(f"script: line {line}: $(({expr.strip()})) is not arithmetic this reader evaluates")

    return ev(tree)


# ------------------------------------------------------------------ the walk


class _Shell:
    def __init__(self, env: dict[str, object] | None, positional: list[str] | None) -> None:
        self.vars: dict[str, object] = dict(env or {})
        self.positional = list(positional or [])
        self.commands: list[Command] = []
        self.notes: list[tuple[int, str]] = []
        self.comments: list[tuple[int, str]] = []
        self.budget = _Budget()
        self.functions: dict[str, list[_Tok]] = {}

    # -------------------------------------------------- expansion

    def _get(self, name: str):
        if name.isdigit():
            k = int(name)
            return self.positional[k - 1] if 0 < k <= len(self.positional) else None
        return self.vars.get(name)

    def _scalar(self, name: str) -> str | None:
        v = self._get(name)
        if isinstance(v, list):
            return v[0].text if v else ""
        return v

    def _param(self, body: str, line: int, unresolved: list[str]):
        """``${body}``: a string, or a list of Words (an array's elements)."""
        self.budget.tick()
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", body)
        if m:
            v = self._get(m.group(1))
            if isinstance(v, list):
                return list(v)
            return [] if v is None else [Word(v, line)]
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]", body)
        if m:
            v = self._get(m.group(1))
            k = int(m.group(2))
            if isinstance(v, list):
                return v[k].text if k < len(v) else ""
            return (v or "") if k == 0 else ""
        m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?", body)
        if m:
            v = self._get(m.group(1))
            if m.group(2):
                return str(len(v) if isinstance(v, list) else int(v is not None))
            return str(len(self._scalar(m.group(1)) or ""))
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+)(?:(:?[-=+?])(.*))?", body, re.S)
        if m:
            name, op, word = m.group(1), m.group(2), m.group(3)
            v = self._scalar(name)
            if op is None:
                if v is None:
                    unresolved.append(name)
                    return "${" + name + "}"
                return v
            empty = v is None or (op.startswith(":") and v == "")
            if op.endswith("+"):
                return "" if empty else self._expand_text(word, line, unresolved)
            if op.endswith("?"):
                if empty:
                    unresolved.append(name)
                    return "${" + name + "}"
                return v
            if empty:
                d = self._expand_text(word, line, unresolved)
                if op.endswith("=") and not name.isdigit():
                    self.vars[name] = d
                return d
            return v
        unresolved.append("${" + body + "}")
        return "${" + body + "}"

    def _expand_text(self, raw: str, line: int, unresolved: list[str]) -> str:
        """Expansion without field splitting (inside double quotes, a default value, an assignment)."""
        return " ".join(w.text for w in self._expand(raw, line, unresolved, split=False)) if raw else ""

    def _expand(self, raw: str, line: int, unresolved: list[str], split: bool = True) -> list[Word]:
        """The fields of a raw word (unquoted expansions split on whitespace when ``split``)."""
        out: list[Word] = []
        cur: list[list[str] | None] = [None]

        def flush() -> None:
            if cur[0] is not None:
                text = "".join(cur[0])
                if len(text) > MAX_VALUE_CHARS:
                    raise InputError(f"script: line {line}: a value grows past {MAX_VALUE_CHARS} characters")
                out.append(Word(text, line, tuple(unresolved)))
                cur[0] = None

        def add(text: str, quoted: bool) -> None:
            if len(text) > MAX_VALUE_CHARS:
                raise InputError(f"script: line {line}: a value grows past {MAX_VALUE_CHARS} characters")
            if quoted or not split:
                if cur[0] is None:
                    cur[0] = []
                if text:
                    cur[0].append(text)
                return
            if text[:1].isspace():
                flush()
            for k, part in enumerate(text.split()):
                if k:
                    flush()
                if cur[0] is None:
                    cur[0] = []
                cur[0].append(part)
            if text[-1:].isspace():
                flush()

        def add_value(v, quoted: bool) -> None:
            if not isinstance(v, list):
                add(v, quoted)
                return
            flush()  # array elements: each its own field(s), on the line it was written
            for w in v:
                pieces = [w.text] if (quoted or not split) else w.text.split()
                out.extend(Word(p, w.line, w.unresolved) for p in pieces)

        def dollar(j: int, quoted: bool) -> int:
            if raw.startswith("$((", j):
                end = _skip_group(raw, j + 1, line)
                expr = raw[j + 3:end - 2]
                expr = self._expand_text(expr, line, unresolved) if "$" in expr else expr
                add(str(arith(expr, self._scalar, line)), quoted)
                return end
            if raw.startswith("$(", j):
                end = _skip_group(raw, j + 1, line)
                cmd = raw[j + 2:end - 1].strip()
                unresolved.append("$(" + cmd[:40] + ")")
                add("$(" + cmd + ")", True)
                return end
            if raw.startswith("${", j):
                end = _skip_group(raw, j + 1, line)
                add_value(self._param(raw[j + 2:end - 1], line, unresolved), quoted)
                return end
            m = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*|\d|[@*#?$!-])", raw[j:])
            if not m:
                add("$", True)
                return j + 1
            name = m.group(1)
            if name in ("@", "*"):
                add_value([Word(p, line) for p in self.positional], quoted)
            elif name == "#":
                add(str(len(self.positional)), quoted)
            elif name in "?$!-":
                add("0", quoted)
            else:
                add_value(self._param(name, line, unresolved), quoted)
            return j + m.end()

        i, n = 0, len(raw)
        while i < n:
            self.budget.tick()
            c = raw[i]
            if c == "\\":  # an escaped character (a trailing backslash is itself)
                add(raw[i + 1] if i + 1 < n and raw[i + 1] != "\n" else ("" if i + 1 < n else "\\"), True)
                i += 2
            elif c == "'":
                j = raw.find("'", i + 1)
                j = n if j < 0 else j
                add(raw[i + 1:j], True)
                i = j + 1
            elif c == '"':
                j = i + 1
                buf: list[str] = []
                cur[0] = cur[0] or []
                while j < n and raw[j] != '"':
                    if raw[j] == "\\" and j + 1 < n and raw[j + 1] in '$`"\\\n':
                        buf.append(raw[j + 1])
                        j += 2
                    elif raw[j] == "$":
                        if buf:
                            add("".join(buf), True)
                            buf = []
                        j = dollar(j, True)
                        cur[0] = cur[0] if cur[0] is not None else []
                    elif raw[j] == "`":
                        k = raw.find("`", j + 1)
                        k = n if k < 0 else k
                        unresolved.append("`" + raw[j + 1:k][:40] + "`")
                        buf.append(raw[j:k + 1])
                        j = k + 1
                    else:
                        buf.append(raw[j])
                        j += 1
                if buf:
                    add("".join(buf), True)
                i = j + 1
            elif c == "`":
                k = raw.find("`", i + 1)
                k = n if k < 0 else k
                unresolved.append("`" + raw[i + 1:k][:40] + "`")
                add(raw[i:k + 1], True)
                i = k + 1
            elif c == "$":
                i = dollar(i, False)
            else:
                j = i
                while j < n and raw[j] not in "\\'\"`$":
                    j += 1
                add(raw[i:j], True)
                i = j
        flush()
        return out

    # -------------------------------------------------- statements

    def _statements(self, toks: list[_Tok]):
        """Split tokens into simple statements: (tokens, the operator that ends it)."""
        cur: list[_Tok] = []
        for t in toks:
            if t.kind == "nl" or (t.kind == "op" and t.text in (";", "&&", "||", "|", "&", ";;")):
                yield cur, t.text
                cur = []
            else:
                cur.append(t)
        yield cur, ""

    def run(self, toks: list[_Tok], depth: int = 0) -> None:
        stmts = [(s, op) for s, op in self._statements(toks)]
        i = 0
        skip_next = False
        while i < len(stmts):
            self.budget.tick()
            s, op = stmts[i]
            if not s:
                i += 1
                continue
            head = s[0].text if s[0].kind == "word" else s[0].text
            if head == "if":
                i = self._if(stmts, i, depth)
                continue
            if head in ("for", "while", "until", "case", "select"):
                end = {"case": "esac"}.get(head, "done")
                j = self._find_end(stmts, i, head, end)
                self.notes.append((s[0].line, f"a {head} block (lines {s[0].line}-{stmts[j][0][0].line if stmts[j][0] else s[0].line}) "
                                               "is not evaluated"))
                i = j + 1
                continue
            if head == "function" or (len(s) >= 3 and s[1].text == "(" and s[2].text == ")") or (
                    len(s) >= 2 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_:-]*\(\)", head)):
                j = i
                depth_b = 0
                started = False
                while j < len(stmts):
                    for t in stmts[j][0]:
                        if t.kind == "op" and t.text == "{":
                            depth_b += 1
                            started = True
                        elif t.kind == "op" and t.text == "}":
                            depth_b -= 1
                    if started and depth_b <= 0:
                        break
                    j += 1
                name = head.removeprefix("function").strip() or (s[1].text if len(s) > 1 else "?")
                self.notes.append((s[0].line, f"function {name.rstrip('()')} is not evaluated"))
                i = j + 1
                continue
            if skip_next:
                skip_next = False
                i += 1
                continue
            ok = self._simple(s, depth)
            if op == "&&" and ok is False:
                skip_next = True
            elif op == "||" and ok is True:
                skip_next = True
            i += 1

    def _find_end(self, stmts, i: int, start: str, end: str) -> int:
        """Index of the statement that closes the block opening at ``stmts[i]`` (nested blocks counted)."""
        opens = {"if", "for", "while", "until", "case", "select"}
        depth = 0
        for j in range(i, len(stmts)):
            words = [t.text for t in stmts[j][0] if t.kind == "word"]
            for k, w in enumerate(words):
                if w in opens and (k == 0 or words[k - 1] in ("then", "do", "else", "!")):
                    depth += 1
                elif w in ("fi", "done", "esac") and k == 0:
                    depth -= 1
                    if depth == 0:
                        return j
        raise InputError(f"script: line {stmts[i][0][0].line}: '{start}' has no '{end}'")

    def _if(self, stmts, i: int, depth: int) -> int:
        """Walk an if/elif/else/fi block: the first branch whose condition holds (a condition the reader
        cannot evaluate counts as false and is noted)."""
        end = self._find_end(stmts, i, "if", "fi")
        # split the block into (condition statements, body statements) branches
        branches: list[tuple[list, list]] = []
        cond: list | None = []
        body: list = []
        mode = "cond"
        nest = 0
        for j in range(i, end + 1):
            s, op = stmts[j]
            words = [t.text if t.kind == "word" else "" for t in s]
            k0 = 0
            if nest == 0 and words and words[0] in ("if", "elif") and (j > i or words[0] == "if"):
                if j > i:
                    branches.append((cond, body))
                cond, body, mode = [], [], "cond"
                k0 = 1
            elif nest == 0 and words and words[0] == "else":
                branches.append((cond, body))
                cond, body, mode = None, [], "body"
                k0 = 1
            elif nest == 0 and words and words[0] == "fi" and j == end:
                branches.append((cond, body))
                break
            if nest == 0 and words[k0:k0 + 1] == ["then"]:
                mode = "body"
                k0 += 1
                rest = s[k0:]
                if rest:
                    body.append((rest, op))
                continue
            rest = s[k0:]
            if mode == "cond":
                if rest and rest[-1].kind == "word" and rest[-1].text == "then":
                    cond.append((rest[:-1], op))
                    mode = "body"
                else:
                    cond.append((rest, op))
                continue
            ws = [t.text for t in rest if t.kind == "word"]
            if ws and ws[0] in ("if", "for", "while", "until", "case"):
                nest += 1
            if ws and ws[0] in ("fi", "done", "esac"):
                nest -= 1
            body.append((rest, op))
        line = stmts[i][0][0].line
        for cond, body in branches:
            if cond is None or self._condition(cond, line):
                flat: list[_Tok] = []
                for s, op in body:
                    flat += s
                    flat.append(_Tok("op", op, s[-1].line if s else line) if op else _Tok("nl", "\n", line))
                self.run(flat, depth)
                break
        return end + 1

    def _condition(self, cond, line: int) -> bool:
        result: bool | None = None
        pending = ""
        for s, op in cond:
            if not s:
                continue
            v = self._test(s, line)
            if result is None or pending == "":
                result = v
            elif pending == "&&":
                result = result and v
            elif pending == "||":
                result = result or v
            pending = op if op in ("&&", "||") else pending
        return bool(result)

    def _test(self, s: list[_Tok], line: int) -> bool:
        words = [t.text for t in s if t.kind == "word"]
        neg = False
        if words and words[0] == "!":
            neg, words = True, words[1:]
        if words and words[0] in ("[[", "[", "test"):
            inner = words[1:-1] if words[0] != "test" else words[1:]
            v = self._bracket(inner, line)
        elif words and words[0].startswith("$(("):
            unresolved: list[str] = []
            v = bool(arith(words[0][3:-2], self._scalar, line)) if not unresolved else None
        else:
            v = None
        if v is None:
            self.notes.append((line, f"condition '{' '.join(words)[:60]}' is not evaluated (taken as false)"))
            return False
        return v != neg

    def _bracket(self, words: list[str], line: int) -> bool | None:
        # && / || inside [[ ]]
        for sep, f in (("||", any), ("&&", all)):
            if sep in words or (sep == "&&" and "-a" in words) or (sep == "||" and "-o" in words):
                parts, cur = [], []
                for w in words:
                    if w == sep or (sep == "&&" and w == "-a") or (sep == "||" and w == "-o"):
                        parts.append(cur)
                        cur = []
                    else:
                        cur.append(w)
                parts.append(cur)
                vals = [self._bracket(p, line) for p in parts]
                if any(v is None for v in vals):
                    return None
                return f(vals)
        neg = False
        if words and words[0] == "!":
            neg, words = True, words[1:]
        unresolved: list[str] = []
        ex = [self._expand_text(w, line, unresolved) for w in words]
        if unresolved:
            return None
        v: bool | None = None
        if len(ex) == 2 and ex[0] in ("-z", "-n"):
            v = (ex[1] == "") if ex[0] == "-z" else (ex[1] != "")
        elif len(ex) == 1:
            v = ex[0] != ""
        elif len(ex) == 3 and ex[1] in ("==", "=", "!="):
            v = (ex[0] == ex[2]) != (ex[1] == "!=")
        elif len(ex) == 3 and ex[1] in ("-eq", "-ne", "-gt", "-lt", "-ge", "-le"):
            try:
                a, b = int(ex[0]), int(ex[2])
            except ValueError:
                return None
            v = {"-eq": a == b, "-ne": a != b, "-gt": a > b, "-lt": a < b, "-ge": a >= b, "-le": a <= b}[ex[1]]
        elif len(ex) == 2 and ex[0] == "-v":
            v = ex[1] in self.vars
        if v is None:
            return None
        return v != neg

    def _assign(self, tok: _Tok, local_env: dict | None = None) -> None:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?=)(.*)", tok.text, re.S)
        name, idx, op, raw = m.group(1), m.group(2), m.group(3), m.group(4)
        unresolved: list[str] = []
        value = self._expand_text(raw, tok.line, unresolved)
        if local_env is not None:
            local_env[name] = value
            return
        if idx:
            return  # associative/indexed element assignment: not needed by launch files
        old = self.vars.get(name)
        if op == "+=":
            if isinstance(old, list):
                old.append(Word(value, tok.line, tuple(unresolved)))
                return
            value = (old or "") + value
        if len(value) > MAX_VALUE_CHARS:
            raise InputError(f"script: line {tok.line}: {name} grows past {MAX_VALUE_CHARS} characters")
        self.vars[name] = value

    def _array(self, tok: _Tok) -> None:
        name, op = tok.text.rstrip("+="), ("+=" if tok.text.endswith("+=") else "=")
        words: list[Word] = []
        for raw, line in tok.items or []:
            unresolved: list[str] = []
            words += self._expand(raw, line, unresolved)
        old = self.vars.get(name)
        if op == "+=" and isinstance(old, list):
            words = old + words
        elif op == "+=" and isinstance(old, str):
            words = [Word(old, tok.line)] + words
        if sum(len(w.text) for w in words) > MAX_VALUE_CHARS:
            raise InputError(f"script: line {tok.line}: {name} grows past {MAX_VALUE_CHARS} characters")
        self.vars[name] = words

    def _simple(self, s: list[_Tok], depth: int) -> bool | None:
        """One simple statement; True/False for a test, None for anything else."""
        words = [t for t in s if t.kind in ("word", "array")]
        if not words:
            return None
        first = words[0]
        if first.kind == "word" and first.text in ("[[", "[", "test", "!"):
            return self._test(s, first.line)
        if first.kind == "word" and first.text.startswith("$(("):
            arith(first.text[3:-2], self._scalar, first.line)
            return None
        k = 0
        builtin = first.text if first.kind == "word" else ""
        if builtin in ("export", "declare", "local", "readonly", "typeset"):
            k = 1
            while k < len(words) and words[k].kind == "word" and words[k].text.startswith("-"):
                k += 1
            for t in words[k:]:
                if t.kind == "array":
                    self._array(t)
                elif re.match(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=", t.text):
                    self._assign(t)
            return None
        if builtin in ("source", ".") and len(words) > 1:
            self.notes.append((first.line, f"'{builtin} {words[1].text}' reads another file: not read"))
            return None
        if builtin in ("unset",):
            for t in words[1:]:
                self.vars.pop(t.text, None)
            return None
        if builtin in ("set", "shopt", "cd", "mkdir", "echo", "printf", "exit", "return", "true", ":", "trap",
                       "ulimit", "umask", "wait", "shift", "pushd", "popd", "rm", "cp", "touch", "sleep"):
            return None
        env: dict[str, str] = {}
        while k < len(words) and (words[k].kind == "array" or re.match(
                r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=", words[k].text)):
            if words[k].kind == "array":
                self._array(words[k])
            else:
                self._assign(words[k], None if k == len(words) - 1 or _all_assign(words[k:]) else env)
            k += 1
        if k >= len(words):
            return None
        cmd: list[Word] = []
        for t in words[k:]:
            if t.text == "<heredoc>":
                continue
            unresolved: list[str] = []
            cmd += self._expand(t.text, t.line, unresolved)
        if not cmd:
            return None
        # bash -c "...": read the string too
        if cmd[0].text.rsplit("/", 1)[-1] in ("bash", "sh") and len(cmd) > 2 and cmd[1].text == "-c":
            if depth >= MAX_DEPTH:
                self.notes.append((first.line, f"bash -c nested more than {MAX_DEPTH} levels: not read"))
                return None
            sub, comments = lex(cmd[2].text, cmd[2].line)
            self.run(sub, depth + 1)
            return None
        self.commands.append(Command(cmd, first.line, env))
        return None


def _all_assign(words) -> bool:
    return all(w.kind == "array" or re.match(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=", w.text) for w in words)


def run(text: str, env: dict[str, object] | None = None, positional: list[str] | None = None) -> Script:
    """Walk a launch script (see the module's docstring)."""
    if len(text) > MAX_SCRIPT_BYTES:
        raise InputError(f"script: {len(text)} characters; the limit is {MAX_SCRIPT_BYTES}")
    sh = _Shell(env, positional)
    toks, comments = lex(text)
    try:
        sh.run(toks)
    except RecursionError:
        raise InputError("script: nested too deeply") from None
    return Script(sh.vars, sh.commands, sh.notes, comments)
