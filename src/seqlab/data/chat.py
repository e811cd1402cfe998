"""A chat model's own prompt format: its tokenizer's chat template (Jinja), rendered as transformers'
`apply_chat_template(messages, add_generation_prompt=True)` renders it.

The environment is transformers' (`utils/chat_template_utils.py`): a sandboxed Jinja environment with
`trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension and a no-op `{% generation %}` block, the
`tojson` filter without HTML escaping, the globals `raise_exception`, `strftime_now`, `dict` and `namespace`
(rejecting underscore names), and the tokenizer's special tokens (`bos_token`, `eos_token`, ...) as variables
beside `messages`, `tools=None`, `documents=None` and `add_generation_prompt`. The rendered text already holds
the template's special tokens, so it is tokenized without adding any (transformers' `tokenize=True`).

`strftime_now` reads today's date, as in transformers (Llama 3.1's template prints it): pass
`date_string` among the variables (`prompt.variables`) for a prompt that does not change from day to day.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from seqlab.config import ConfigError

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


class ChatTemplateError(ConfigError):
    """A chat template that does not render: its own message, with where the template came from."""


@dataclass(frozen=True)
class ChatTemplate:
    """A tokenizer's chat template and the special tokens it sees as variables."""

    template: str
    variables: dict[str, Any] = field(default_factory=dict)  # bos_token, eos_token, ... (special_tokens_map)
    origin: str = "the checkpoint"  # where it came from, named in errors (the imported folder)

    def render(self, messages: Sequence[Message], extra: Mapping[str, Any] | None = None) -> str:
        """The prompt of `messages` with the assistant's turn opened (add_generation_prompt=True)."""
        import jinja2

        try:
            template = compiled(self.template)
        except ChatTemplateError as err:
            raise ChatTemplateError(f"{self.origin}: {err}") from None
        try:
            return template.render(messages=[dict(m) for m in messages], tools=None, documents=None,
                                   add_generation_prompt=True, **{**self.variables, **dict(extra or {})})
        except jinja2.TemplateError as err:
            raise ChatTemplateError(f"{self.origin}: its chat template does not render these messages "
                                    f"({type(err).__name__}: {err})") from None

    def to_dict(self) -> dict[str, Any]:
        return {"template": self.template, "variables": dict(self.variables), "origin": self.origin}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any] | None) -> ChatTemplate | None:
        return None if not state else cls(str(state["template"]), dict(state.get("variables") or {}),
                                          str(state.get("origin") or "the checkpoint"))


def chosen_template(template: str | dict | list | None, origin: str) -> str | None:
    """The template transformers applies without a name: the string, or of several named ones "default"."""
    if template is None or isinstance(template, str):
        return template
    named = dict(template) if isinstance(template, dict) else {t["name"]: t["template"] for t in template}
    if "default" not in named:
        raise ChatTemplateError(f"{origin}: its tokenizer has chat templates named {sorted(named)} and none is "
                                "'default', the one transformers applies without a name")
    return str(named["default"])


@functools.lru_cache(maxsize=16)
def compiled(template: str) -> Any:
    """The template compiled in transformers' environment (once per template text)."""
    import jinja2

    try:
        return environment().from_string(template)
    except jinja2.TemplateSyntaxError as err:
        raise ChatTemplateError(f"its chat template is not valid Jinja (line {err.lineno}: {err})") from None


@functools.cache
def environment() -> Any:
    """transformers' chat-template environment: a sandbox that trims blocks, its `generation` tag and loop
    controls, its `tojson` filter, and its globals (`raise_exception`, `strftime_now`, `dict`, `namespace`)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[generation_extension(), loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=template_namespace())
    return env


def generation_extension() -> type:
    """`{% generation %}...{% endgeneration %}` renders its body (transformers tracks assistant spans with it,
    which a prompt does not need)."""
    import jinja2
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    return Generation


def template_namespace() -> type:
    """Jinja's namespace, refusing underscore-prefixed names (as transformers' does)."""
    import jinja2

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace.check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute.")

    return TemplateNamespace


class TemplateDict:
    """`dict(...)` without attribute access to the type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
           sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)
