"""Renders chat templates as Hugging Face transformers' apply_chat_template
does (Jinja2 sandbox, trim_blocks and lstrip_blocks, loop controls, tojson
as json.dumps with ensure_ascii=False, raise_exception, strftime_now, and
tools=None when there are none): the Python oracle of the Go template
tests, beside render.mjs. stdin and stdout as render.mjs's."""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def main():
    jobs = json.load(sys.stdin)
    out = []
    for job in jobs:
        case = job["case"]
        now = datetime.datetime.strptime(case.get("now") or "2024-07-26", "%Y-%m-%d")

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def strftime_now(fmt):
            return now.strftime(fmt)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        ctx = dict(case.get("extra") or {})
        ctx.update(messages=case["messages"], tools=case.get("tools"), documents=None,
                   add_generation_prompt=bool(case.get("add_generation_prompt")),
                   bos_token=job.get("bos_token") or "", eos_token=job.get("eos_token") or "")
        try:
            out.append({"text": env.from_string(job["template"]).render(**ctx)})
        except Exception as e:  # the template's own refusal, or any failure
            out.append({"error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


main()
