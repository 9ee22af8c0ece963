"""Site fixes for the pinned Jupyter Book 1.x stack.

Sphinx 7.4 keeps two copies of sphinx-thebe's inline configuration script (`const THEBE_JS_URL = ...`):
its filename is None in one copy and "" in the other, so Sphinx does not see them as equal. The second copy throws
"Identifier 'THEBE_JS_URL' has already been declared" in every page's console. Drop exact duplicates.

myst-nb has Sphinx add MathJax (from a CDN) to every page, math or not. The book writes its formulas
as code, so no page needs it: drop it from pages without equations, so that the site loads nothing
from the network (the browser check runs offline) and a page with math still gets it.
"""


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        # An inline script is its body; Sphinx stores its filename as None or as "".
        key = ("inline", attributes["body"]) if "body" in attributes else str(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    if not app.env.get_domain("math").has_equations(pagename):
        unique = [script for script in unique if not _is_mathjax(script)]
    context["script_files"] = unique


def _is_mathjax(script) -> bool:
    body = getattr(script, "attributes", {}).get("body", "")
    return "mathjax" in str(script).lower() or "window.MathJax" in body


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
