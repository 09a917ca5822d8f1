#!/usr/bin/python3
"""rankwise-report: a picture of a run from its metrics log.

    rankwise-report RUN.jsonl -o report.html   # plots (inline SVG) + epoch and configuration tables
    rankwise-report RUN.jsonl -o report.svg    # the plots only
    rankwise-report RUN.jsonl -o report.png

RUN.jsonl is what rankwise::monitor::MetricsLog writes (rank 0, JSON Lines):
one "config" record, then "step" and "epoch" records. Curves drawn:
every metric of the step records (losses first) over the step, every metric
of the epoch records at the step where the epoch ended, the global
samples/s, and, when records carry "ranks": [{rank, samples_per_s, wait_ms,
compute_ms}, ...], per-rank throughput and wait time (that panel is left
out otherwise). A log cut short (a killed run) is read up to its last whole
line. The output is self-contained: no network, no external files.

Plotting is matplotlib's (Debian's python3-matplotlib), headless (Agg and
SVG backends). Exit codes: 0 written, 2 bad usage or an unreadable log.
"""

import argparse
import html
import io
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Fixed colours, so that a test can find each curve's pixels.
LOSS_COLORS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b"]
METRIC_COLORS = ["#2ca02c", "#d62728", "#e377c2", "#bcbd22", "#7f7f7f"]
THROUGHPUT_COLOR = "#17becf"


class LogError(Exception):
    pass


def read_log(path):
    """Records of a JSON Lines log; a torn last line (killed run) is skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise LogError(f"cannot read the metrics log {path}: {e.strerror}")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number >= len(lines) - 1:  # the last line of a run killed mid-write
                print(f"rankwise-report: {path}:{number}: incomplete last line skipped", file=sys.stderr)
                break
            raise LogError(f"{path}:{number}: not JSON ({e.msg}); is this a rankwise metrics log?")
        if not isinstance(record, dict) or "kind" not in record:
            raise LogError(f"{path}:{number}: a record without \"kind\"; is this a rankwise metrics log?")
        records.append(record)
    if not records:
        raise LogError(f"{path}: no records")
    return records


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def series(records, kind):
    """{metric name: ([step...], [value...])} of the records of one kind."""
    out = {}
    for r in records:
        if r.get("kind") != kind or not is_number(r.get("step")):
            continue
        for name, value in (r.get("metrics") or {}).items():
            if is_number(value):
                xs, ys = out.setdefault(name, ([], []))
                xs.append(r["step"])
                ys.append(value)
    return out


def loss_first(names):
    return sorted(names, key=lambda n: ("loss" not in n, n))


def throughput(records):
    xs, ys = [], []
    for r in records:
        if r.get("kind") == "step" and is_number(r.get("step")) and is_number(r.get("samples_per_s")):
            xs.append(r["step"])
            ys.append(r["samples_per_s"])
    return xs, ys


def per_rank(records):
    """{rank: {"step": [...], "samples_per_s": [...], "wait_ms": [...]}} from "ranks" fields."""
    out = {}
    for r in records:
        if not isinstance(r.get("ranks"), list) or not is_number(r.get("step")):
            continue
        for entry in r["ranks"]:
            if not isinstance(entry, dict) or not is_number(entry.get("rank")):
                continue
            d = out.setdefault(int(entry["rank"]), {"step": [], "samples_per_s": [], "wait_ms": []})
            d["step"].append(r["step"])
            d["samples_per_s"].append(entry.get("samples_per_s") if is_number(entry.get("samples_per_s")) else math.nan)
            d["wait_ms"].append(entry.get("wait_ms") if is_number(entry.get("wait_ms")) else math.nan)
    return out


def config_of(records):
    for r in records:
        if r.get("kind") == "config":
            return r
    return {}


def title_of(records):
    c = config_of(records)
    parts = [str(c.get("config", {}).get("program", "run"))] if c else ["run"]
    if "world_size" in c:
        parts.append(f"world size {c['world_size']}")
    if "started_at" in c:
        parts.append(f"started {c['started_at']}")
    return " | ".join(parts)


def figure(records):
    step_series = series(records, "step")
    epoch_series = series(records, "epoch")
    tx, ty = throughput(records)
    ranks = per_rank(records)
    losses = loss_first([n for n in step_series if "loss" in n] + [n for n in epoch_series if "loss" in n])
    losses = list(dict.fromkeys(losses))
    others = [n for n in list(step_series) + list(epoch_series) if "loss" not in n]
    others = list(dict.fromkeys(others))

    panels = ["loss", "metrics", "throughput"] + (["ranks"] if ranks else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.0 * len(panels)), squeeze=False, sharex=True)
    axes = [a[0] for a in axes]
    fig.suptitle(title_of(records), fontsize=11)

    ax = axes[0]
    ax.set_title("loss (reduced over ranks)", fontsize=10)
    for i, name in enumerate(losses):
        color = LOSS_COLORS[i % len(LOSS_COLORS)]
        if name in step_series:
            ax.plot(*step_series[name], color=color, linewidth=1.5, label=f"{name} (steps)")
        if name in epoch_series:
            ax.plot(*epoch_series[name], color=color, marker="o", linestyle="--", label=f"{name} (epochs)")
    ax.set_xlabel("step")
    if not losses:
        ax.text(0.5, 0.5, "no loss recorded", ha="center", va="center", transform=ax.transAxes)

    ax = axes[1]
    ax.set_title("metrics (reduced over ranks)", fontsize=10)
    for i, name in enumerate(others):
        color = METRIC_COLORS[i % len(METRIC_COLORS)]
        if name in step_series:
            ax.plot(*step_series[name], color=color, linewidth=1.5, label=f"{name} (steps)")
        if name in epoch_series:
            ax.plot(*epoch_series[name], color=color, marker="o", linewidth=1.5, label=f"{name} (epochs)")
    ax.set_xlabel("step")
    if not others:
        ax.text(0.5, 0.5, "no other metrics recorded", ha="center", va="center", transform=ax.transAxes)

    ax = axes[2]
    ax.set_title("global throughput", fontsize=10)
    if tx:
        ax.plot(tx, ty, color=THROUGHPUT_COLOR, linewidth=1.5, label="samples/s (all ranks)")
    else:
        ax.text(0.5, 0.5, "no samples/s recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_ylabel("samples/s")

    if ranks:
        ax = axes[3]
        ax.set_title("per rank: samples/s (solid), time waiting in collectives (dashed)", fontsize=10)
        wait_axis = ax.twinx()
        for i, (rank, d) in enumerate(sorted(ranks.items())):
            color = plt.get_cmap("tab10")(i % 10)
            ax.plot(d["step"], d["samples_per_s"], color=color, linewidth=1.2, label=f"rank {rank}")
            wait_axis.plot(d["step"], d["wait_ms"], color=color, linewidth=1.0, linestyle="--")
        ax.set_xlabel("step")
        ax.set_ylabel("samples/s")
        wait_axis.set_ylabel("wait ms per step")

    for ax in axes[:-1]:
        ax.set_xlabel("")  # the steps are shared; labelled below the last panel
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def render(fig, fmt):
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=100, facecolor="white")
    return buffer.getvalue()


def fmt_value(value):
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def table(header, rows):
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(fmt_value(v))}</td>" for v in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def html_report(records, svg):
    epochs = [r for r in records if r.get("kind") == "epoch"]
    names = list(dict.fromkeys(n for r in epochs for n in (r.get("metrics") or {})))
    epoch_rows = [[r.get("epoch", ""), r.get("step", ""), r.get("time", "")]
                  + [(r.get("metrics") or {}).get(n, "") for n in names]
                  + [r.get("samples_per_s", "")] for r in epochs]
    configs = [r for r in records if r.get("kind") == "config"]
    config_tables = []
    for i, c in enumerate(configs):
        rows = [[k, v] for k, v in c.items() if k not in ("kind", "config")]
        rows += [[k, v] for k, v in (c.get("config") or {}).items()]
        heading = "Configuration" if len(configs) == 1 else f"Configuration (segment {i + 1} of {len(configs)}: a resumed run)"
        config_tables.append(f"<h2>{html.escape(heading)}</h2>\n" + table(["key", "value"], rows))
    svg_text = svg.decode("utf-8")
    svg_text = svg_text[svg_text.find("<svg"):]  # inline: without the XML declaration and DOCTYPE
    steps = sum(1 for r in records if r.get("kind") == "step")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title_of(records))}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #eee; }}
td:first-child {{ text-align: left; }}
</style></head><body>
<h1>{html.escape(title_of(records))}</h1>
<p>{len(epochs)} epoch record(s), {steps} step record(s). Metrics are reduced over all ranks.</p>
<h2>Epochs</h2>
{table(["epoch", "step", "time (s)"] + names + ["samples/s"], epoch_rows) if epochs else "<p>no epoch finished</p>"}
<h2>Curves</h2>
{svg_text}
{"".join(config_tables)}
</body></html>
"""


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="rankwise-report",
        description="Plots a rankwise metrics log (JSON Lines): loss and metric curves, throughput, "
        "epoch summaries and the run's configuration, in one self-contained file.",
        epilog="E.g. rankwise-report build/fashion_mnist_checkpoints/metrics.jsonl -o report.html")
    parser.add_argument("log", help="the metrics log (RUN.jsonl)")
    parser.add_argument("-o", "--output", required=True,
                        help="report.html (plots and tables), report.svg or report.png (plots)")
    args = parser.parse_args(argv)
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".html", ".htm", ".svg", ".png"):
        parser.error(f"-o {args.output}: the name must end in .html, .svg or .png")
    try:
        records = read_log(args.log)
    except LogError as e:
        print(f"rankwise-report: {e}", file=sys.stderr)
        return 2
    fig = figure(records)
    if ext == ".png":
        data = render(fig, "png")
    elif ext == ".svg":
        data = render(fig, "svg")
    else:
        data = html_report(records, render(fig, "svg")).encode("utf-8")
    plt.close(fig)
    tmp = args.output + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, args.output)
    except OSError as e:
        print(f"rankwise-report: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"rankwise-report: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
