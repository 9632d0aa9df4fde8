#!/usr/bin/env python3
"""Offline checker for a CashCode SKILL.md (the rules of the skill-creator contract).

Usage: quick_validate.py path/to/SKILL.md [expected-name]
Exit status 0 when valid, 1 with one error per line otherwise. Uses PyYAML when it is
installed; otherwise a small parser that understands flat `key: value` pairs, inline
`[a, b]` lists, `- item` lists and one level of nested mappings (enough for frontmatter).
"""
import re
import sys
import unicodedata

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
FRONT_RE = re.compile(r"\A---\s*\r?\n(.*?)\r?\n---\s*\r?\n?", re.S)
DEP_KEYS = ("tools", "mcp_servers", "bins", "env")


def scalar(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "True", "yes", "on"):
        return True
    if text in ("false", "False", "no", "off"):
        return False
    if text in ("", "null", "~"):
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [scalar(x) for x in inner.split(",")] if inner else []
    return text


def tiny_yaml(src):
    root, key, sub = {}, None, None
    for raw in src.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        if indent == 0:
            k, sep, v = line.partition(":")
            if not sep:
                raise ValueError("expected 'key: value': " + line)
            k, sub = k.strip(), None
            root[k] = scalar(v) if v.strip() else None
            key = None if v.strip() else k
            continue
        if key is None:
            raise ValueError("unexpected indentation: " + line)
        if line.startswith("-"):
            holder, slot = (root, key) if sub is None else (root[key], sub)
            if holder[slot] is None:
                holder[slot] = []
            if not isinstance(holder[slot], list):
                raise ValueError("mixed list and mapping under " + slot)
            holder[slot].append(scalar(line[1:]))
            continue
        k, sep, v = line.partition(":")
        if not sep:
            raise ValueError("expected 'key: value': " + line)
        if root[key] is None:
            root[key] = {}
        if not isinstance(root[key], dict):
            raise ValueError("mixed list and mapping under " + key)
        root[key][k.strip()] = scalar(v) if v.strip() else None
        sub = None if v.strip() else k.strip()
    return root


def load_yaml(src):
    try:
        import yaml  # type: ignore

        return yaml.safe_load(src)
    except ImportError:
        return tiny_yaml(src)


def string_list(value, label, errors):
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(x, str) and x.strip() for x in value):
        errors.append(f"{label} must be a list of non-empty strings")


def validate(text, expected=None):
    errors = []
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return ["SKILL.md cannot be empty"]
    if len(text.encode("utf-8")) > 80_000:
        return ["SKILL.md is too large"]
    m = FRONT_RE.match(text)
    if not m:
        return ["SKILL.md must start with YAML frontmatter"]
    try:
        fm = load_yaml(m.group(1))
    except Exception as exc:  # noqa: BLE001 - any parser error is a finding
        return [f"invalid YAML frontmatter: {exc}"]
    if not isinstance(fm, dict):
        return ["frontmatter must be a mapping"]
    name, desc = fm.get("name"), fm.get("description")
    if not isinstance(name, str) or not isinstance(desc, str):
        return ["name and description must be strings"]
    if not NAME_RE.match(name.strip()):
        errors.append("invalid Skill name; use lowercase letters, numbers, dots, underscores, and hyphens")
    elif expected and name.strip() != expected:
        errors.append("frontmatter name must match the package directory")
    if not desc.strip():
        errors.append("description cannot be empty")
    dn = fm.get("display_name")
    if dn is not None:
        if not isinstance(dn, str):
            errors.append("display_name must be a string")
        elif not dn.strip():
            errors.append("display_name cannot be empty")
        elif len(dn.strip()) > 80:
            errors.append("display_name must be at most 80 characters")
        elif any(unicodedata.category(c).startswith("C") for c in dn.strip()):
            errors.append("display_name cannot contain control characters")
    version = fm.get("version", 1)
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        errors.append("version must be a positive integer")
    always = fm.get("always", False)
    if always is not None and not isinstance(always, bool):
        errors.append("always must be a boolean")
    string_list(fm.get("tags"), "tags", errors)
    string_list(fm.get("triggers"), "triggers", errors)
    for section in ("requires", "optional"):
        deps = fm.get(section)
        if deps is None:
            continue
        if not isinstance(deps, dict):
            errors.append(f"{section} must be a mapping")
            continue
        for key in DEP_KEYS:
            string_list(deps.get(key), f"{section}.{key}", errors)
    if not text[m.end():].strip():
        errors.append("SKILL.md body cannot be empty")
    return errors


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as fh:
            raw = fh.read()
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        print("SKILL.md must be UTF-8")
        return 1
    except OSError as exc:
        print(f"cannot read {argv[1]}: {exc.strerror}")
        return 1
    errors = validate(text, argv[2] if len(argv) > 2 else None)
    for e in errors:
        print(e)
    if not errors:
        print("valid")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
