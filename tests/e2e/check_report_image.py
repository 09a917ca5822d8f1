#!/usr/bin/python3
"""check_report_image.py curves|no-curves IMAGE.png: whether a picture of a
rankwise-report shows its curves, by counting pixels (not the file's size).

Each curve has a fixed colour (tools/rankwise-report/rankwise_report.py):
the step loss #1f77b4, the first epoch metric (the test accuracy of the
Fashion-MNIST job) #2ca02c, the throughput #17becf. A pixel counts for a
colour when each channel is within 40 of it (anti-aliased edges are not
counted). `curves`: the picture is not blank (over 3 % of its pixels are not
white) and each colour covers more pixels than its legend entry alone could
(thresholds below). `no-curves`: none of the colours is there beyond a
legend's worth (the control: a log without records draws no curve).
"""
import sys

import matplotlib.image
import numpy as np

COLOURS = {  # name: (RGB, pixels a drawn curve has at least)
    "loss": ((0x1F, 0x77, 0xB4), 400),
    "test accuracy": ((0x2C, 0xA0, 0x2C), 150),
    "throughput": ((0x17, 0xBE, 0xCF), 400),
}
LEGEND_ONLY = 120  # a legend's sample line and marker stay below this


def counts(path):
    image = matplotlib.image.imread(path)
    if image.dtype != np.uint8:
        image = (image * 255).round()
    rgb = image[..., :3].astype(np.int32)
    non_white = np.any(rgb < 245, axis=-1).mean()
    found = {}
    for name, (colour, _) in COLOURS.items():
        found[name] = int(np.all(np.abs(rgb - np.array(colour)) <= 40, axis=-1).sum())
    return rgb.shape, non_white, found


def main():
    mode, path = sys.argv[1], sys.argv[2]
    shape, non_white, found = counts(path)
    print(f"{path}: {shape[1]}x{shape[0]} pixels, {non_white:.1%} not white, curve pixels {found}")
    if mode == "curves":
        ok = non_white > 0.03 and all(found[n] >= COLOURS[n][1] for n in COLOURS)
    elif mode == "no-curves":
        ok = all(found[n] < LEGEND_ONLY for n in COLOURS)
    else:
        sys.exit(f"usage: {sys.argv[0]} curves|no-curves IMAGE.png")
    print("ok" if ok else f"FAIL: expected {mode}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
