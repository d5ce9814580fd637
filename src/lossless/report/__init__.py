"""What a person sees: every command's result as a terminal table, JSON and a self-contained HTML page.
``report/<command>.py`` renders that command's result (``emit``: table, JSON, files); the rest are parts.

bench.py         ``emit()``: bench's table, summary.json and .csv, the HTML report
probe.py         ``emit()``: probe's verdict table and probe.json
verify.py        ``emit()``: verify's verdict, verify.json, its HTML section
inspect.py       ``emit()``: inspect's cards and inspect.json; inspect_html.py: its page
inspect_html.py  ``render()``: inspect's cards as one page; ``links()`` to them from a run's report
tasks.py         ``emit()``: tasks' tables, tasks.json and page
advise.py        ``emit()``: advise's tables, JSON and the trade-off page
demo.py          ``DemoResult``: what the demo found, in a few lines
trend.py         ``render_terminal()``: a watch's history, its runs and flagged changes
compare.py       ``load()``, ``emit()``: ``lossless compare``: two saved runs, B's ratios to A's with CIs
sweep.py         ``emit()``: ``lossless sweep``'s table, sweep.json, its run folders and the Pareto page
merge.py         ``merge()``: runs made at the same time on several machines -> one run
html.py          ``render_run()``: one run's page (plots, tables, setup); ``build()`` from a run folder
terminal.py      ``render()``: bench's summary as a rich table
notes.py         ``endpoint_notes()``: what the tables leave out, in sentences
plots.py         ``figures()``: a run's records -> the report's charts
page.py          ``page()``, ``section()``, ``table()``: the HTML every page shares
svg.py           ``Chart``, ``render()``: small inline SVG charts
"""
