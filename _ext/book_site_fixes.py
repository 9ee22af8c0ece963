"""Site fixes for the pinned Jupyter Book 1.x stack.

Sphinx 7.4 keeps two copies of sphinx-thebe's inline configuration script (`const
THEBE_JS_URL = ...`): its filename is None in one copy and "" in the other, so Sphinx
does not see them as equal. The second copy throws "Identifier 'THEBE_JS_URL' has
already been declared" in every page's console. Drop exact duplicates.

Formulas are typeset offline. Sphinx loads MathJax from a CDN by default; the site
serves MathJax 2.7 itself instead, from the pinned `jupyter-server-mathjax` package (in
the lock), copied into `_static/mathjax` (see `_config.yml`: `mathjax_path`,
`mathjax2_config`). Pages without equations load no MathJax at all.

Kaggle beside Colab. The theme's launch menu knows Colab, Binder and others but not
Kaggle, whose notebooks offer a TPU v5e-8 (8 real chips; Colab's free TPU is one). The
Kaggle entry is derived from the Colab one, so both follow `repository` in
_config.yml, the one place the repository's address is set."""

import importlib.util
import shutil
from pathlib import Path


def mathjax_source() -> Path:
    """The MathJax 2.7 tree that jupyter-server-mathjax ships."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the site serves MathJax from the `jupyter-server-mathjax` package: "
            "install the lock (make venv)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def _copy_mathjax(app, exception):
    if exception is None and app.builder.format == "html":
        target = Path(app.outdir) / "_static" / "mathjax"
        if not (target / "MathJax.js").exists():
            shutil.copytree(mathjax_source(), target, dirs_exist_ok=True)


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
    attributes = getattr(script, "attributes", {})
    body = attributes.get("body", "")
    return (
        "mathjax" in str(script).lower()
        or "window.MathJax" in body
        or "MathJax.Hub" in body
        or attributes.get("type") == "text/x-mathjax-config"
    )


def _no_mathjax3_config(app):
    """myst-parser fills `mathjax3_config`, which Sphinx would write as
    `window.MathJax = {...}`: MathJax 2 would read that object as its configuration. The
    site's MathJax 2 takes `mathjax2_config` from _config.yml instead."""
    app.config.mathjax3_config = None


def _add_kaggle(app, pagename, templatename, context, doctree):
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in list(group["buttons"]):
            _, found, rest = button.get("url", "").partition(
                "colab.research.google.com/github/"
            )
            if button.get("text") == "Colab" and found:
                group["buttons"].append(
                    {
                        "type": "link",
                        "text": "Kaggle",
                        "tooltip": "Launch on Kaggle (TPU v5e-8)",
                        "icon": "fab fa-kaggle",
                        "url": "https://kaggle.com/kernels/welcome?src="
                        f"https://github.com/{rest}",
                    }
                )


def setup(app):
    # after the theme's launch buttons (priority 501), before the page is written
    app.connect("html-page-context", _add_kaggle, priority=502)
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.connect("builder-inited", _no_mathjax3_config, priority=900)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
