#!/usr/bin/python3
"""rankwise-report: a picture of a run from its metrics log.

    rankwise-report RUN.jsonl -o report.html   # plots (inline SVG) + epoch and configuration tables
    rankwise-report RUN.jsonl -o report.svg    # the plots only
    rankwise-report RUN.jsonl -o report.png
    rankwise-report RUN.jsonl --tensorboard runs/demo   # scalars TensorBoard reads

RUN.jsonl is what rankwise::monitor::MetricsLog writes (rank 0, JSON Lines):
one "config" record, then "step" and "epoch" records. Curves drawn:
every metric of the step records (losses first) over the step, every metric
of the epoch records at the step where the epoch ended, the global
samples/s, and, when records carry "ranks": [{rank, samples_per_s, wait_ms,
compute_ms}, ...], per-rank throughput and wait time (that panel is left
out otherwise). A log cut short (a killed run) is read up to its last whole
line. The output is self-contained: no network, no external files.

Plotting is matplotlib's (Debian's python3-matplotlib), headless (Agg and
SVG backends). --tensorboard DIR writes the same values as TensorBoard
scalars, one event file in DIR (tags: each step metric by its name,
"samples_per_s", "epoch/<metric>", "rank<r>/samples_per_s" and
"rank<r>/wait_ms"), encoded with Debian's python3-protobuf (TensorBoard's
Event and Summary messages, declared here by their field numbers) and framed
as TFRecords with CRC-32C checksums (python3-crcmod). Exit codes: 0 written, 2 bad usage or an unreadable log.
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
    except UnicodeDecodeError:
        raise LogError(f"{path} is not text (binary or compressed?); is this a rankwise metrics log?")
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
            # The log writes a NaN or infinite value (a diverged loss) as null:
            # kept as NaN, a gap in the curve that non_finite() reports.
            if is_number(value) or value is None or (isinstance(value, float) and not math.isfinite(value)):
                xs, ys = out.setdefault(name, ([], []))
                xs.append(r["step"])
                ys.append(value if is_number(value) else math.nan)
    return out


def non_finite(points):
    """The steps of a series whose value is not a finite number."""
    return [x for x, y in zip(*points) if not math.isfinite(y)]


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

    def series_panel(ax, title, names, colors, epoch_linestyle, empty_text):
        ax.set_title(title, fontsize=10)
        for i, name in enumerate(names):
            color = colors[i % len(colors)]
            bad = []
            if name in step_series:
                ax.plot(*step_series[name], color=color, linewidth=1.5, label=f"{name} (steps)")
                bad += non_finite(step_series[name])
            if name in epoch_series:
                ax.plot(*epoch_series[name], color=color, marker="o", linewidth=1.5,
                        linestyle=epoch_linestyle, label=f"{name} (epochs)")
                bad += non_finite(epoch_series[name])
            if bad:
                for x in sorted(set(bad)):
                    ax.axvline(x, color="red", linewidth=0.8, alpha=0.5)
                ax.text(0.01, 0.04 + 0.08 * i, f"{name}: not finite (NaN/inf) at {len(set(bad))} step(s), "
                        f"first {min(bad)}", color="red", fontsize=9, transform=ax.transAxes, va="bottom",
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        ax.set_xlabel("step")
        if not names:
            ax.text(0.5, 0.5, empty_text, ha="center", va="center", transform=ax.transAxes)

    series_panel(axes[0], "loss (reduced over ranks)", losses, LOSS_COLORS, "--", "no loss recorded")
    series_panel(axes[1], "metrics (reduced over ranks)", others, METRIC_COLORS, "-",
                 "no other metrics recorded")

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
    def metric_cell(metrics, name):
        if name not in metrics:
            return ""
        return "not finite" if metrics[name] is None else metrics[name]

    epoch_rows = [[r.get("epoch", ""), r.get("step", ""), r.get("time", "")]
                  + [metric_cell(r.get("metrics") or {}, n) for n in names]
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


# TensorBoard's event file: TFRecords (length, masked CRC-32C of the length,
# data, masked CRC-32C of the data) of tensorboard.Event messages, whose
# field numbers are TensorBoard's (tensorboard/compat/proto/event.proto and
# summary.proto): Event{double wall_time = 1; int64 step = 2;
# string file_version = 3; Summary summary = 5}, Summary{repeated Value value
# = 1}, Value{string tag = 1; oneof value {float simple_value = 2}} (in the
# oneof, as TensorBoard declares it, a 0.0 is written, not left out).
def event_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="rankwise_tensorboard_event.proto",
                                               package="rankwise_tensorboard", syntax="proto3")
    value = proto.message_type.add(name="SummaryValue")
    value.field.add(name="tag", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    value.oneof_decl.add(name="value")
    value.field.add(name="simple_value", number=2, type=f.TYPE_FLOAT, label=f.LABEL_OPTIONAL,
                    oneof_index=0)
    summary = proto.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                      type_name=".rankwise_tensorboard.SummaryValue")
    event = proto.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=f.TYPE_DOUBLE, label=f.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=f.TYPE_MESSAGE, label=f.LABEL_OPTIONAL,
                    type_name=".rankwise_tensorboard.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("rankwise_tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def tfrecord(data, crc32c):
    import struct

    def masked(crc):
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked(crc32c(header))) + data +
            struct.pack("<I", masked(crc32c(data))))


def start_time(records):
    """The run's start as Unix seconds (the config record's started_at), else 0."""
    import datetime

    started = config_of(records).get("started_at")
    try:
        return datetime.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return 0.0


def scalars(records):
    """[(wall_time, step, tag, value)] of every number the log holds."""
    t0 = start_time(records)
    out = []
    for r in records:
        if r.get("kind") not in ("step", "epoch") or not is_number(r.get("step")):
            continue
        wall = t0 + (r["time"] if is_number(r.get("time")) else 0.0)
        prefix = "epoch/" if r["kind"] == "epoch" else ""
        for name, value in (r.get("metrics") or {}).items():
            if is_number(value):
                out.append((wall, r["step"], prefix + name, value))
        if is_number(r.get("samples_per_s")):
            out.append((wall, r["step"], prefix + "samples_per_s", r["samples_per_s"]))
        for entry in r.get("ranks") or []:
            if isinstance(entry, dict) and is_number(entry.get("rank")):
                for key in ("samples_per_s", "wait_ms", "compute_ms"):
                    if is_number(entry.get(key)):
                        out.append((wall, r["step"], f"rank{int(entry['rank'])}/{key}", entry[key]))
    return out


def write_tensorboard(records, directory):
    """Writes the log's scalars into one new event file in `directory`; returns its path."""
    import crcmod.predefined
    import socket

    crc32c = crcmod.predefined.mkCrcFun("crc-32c")
    Event = event_class()
    t0 = start_time(records)
    data = [tfrecord(Event(wall_time=t0, file_version="brain.Event:2").SerializeToString(), crc32c)]
    for wall, step, tag, value in scalars(records):
        event = Event(wall_time=wall, step=int(step))
        event.summary.value.add(tag=tag, simple_value=value)
        data.append(tfrecord(event.SerializeToString(), crc32c))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"events.out.tfevents.{int(t0)}.{socket.gethostname()}.rankwise")
    with open(path + ".tmp", "wb") as f:
        f.write(b"".join(data))
    os.replace(path + ".tmp", path)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="rankwise-report",
        description="Plots a rankwise metrics log (JSON Lines): loss and metric curves, throughput, "
        "epoch summaries and the run's configuration, in one self-contained file.",
        epilog="E.g. rankwise-report build/fashion_mnist_checkpoints/metrics.jsonl -o report.html")
    parser.add_argument("log", help="the metrics log (RUN.jsonl)")
    parser.add_argument("-o", "--output",
                        help="report.html (plots and tables), report.svg or report.png (plots)")
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="also write the scalars as a TensorBoard event file in DIR "
                        "(tensorboard --logdir DIR)")
    args = parser.parse_args(argv)
    if not args.output and not args.tensorboard:
        parser.error("give -o report.html|.svg|.png, --tensorboard DIR, or both")
    ext = os.path.splitext(args.output or "")[1].lower()
    if args.output and ext not in (".html", ".htm", ".svg", ".png"):
        parser.error(f"-o {args.output}: the name must end in .html, .svg or .png")
    try:
        records = read_log(args.log)
    except LogError as e:
        print(f"rankwise-report: {e}", file=sys.stderr)
        return 2
    if args.tensorboard:
        try:
            path = write_tensorboard(records, args.tensorboard)
        except OSError as e:
            print(f"rankwise-report: cannot write the TensorBoard events in {args.tensorboard}: "
                  f"{e.strerror}", file=sys.stderr)
            return 2
        print(f"rankwise-report: wrote {path}")
        if not args.output:
            return 0
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
        if os.path.isfile(tmp):
            os.remove(tmp)
        print(f"rankwise-report: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"rankwise-report: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
