"""SmartNoise Synth's MST (snsynth.mst, Private-PGM's reference MST on mbi 1.x), on the bench's codes.

Budget: SmartNoise takes (ε, δ) and converts them itself (snsynth.utils.cdp_rho: OpenDP's zCDP → (ε, δ) map,
tighter than dpcli's ρ = (√(ε+L) − √L)²); the ρ it used is reported. Neighbours: add/remove (each marginal's
sensitivity 1); it has no other choice. Its categories are the public domain: the LabelTransformer is fitted on a
frame holding every code, never on the data (fitted on the data it would learn the value set from it). Noise:
OpenDP's float Gaussian (`make_gaussian` on floats) for the marginals, a float softmax over np.random for the
selection. Its estimation uses the TRUE row count as the model's total (snsynth.mst: `known_total=len(data)`).
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import pandas as pd
from common import parse_args, read_codes, read_domain, report, write_codes
from snsynth import Synthesizer
from snsynth.transform import LabelTransformer, TableTransformer
from snsynth.utils import cdp_rho


def main() -> None:
    args = parse_args()
    columns, sizes = read_domain(args.domain)
    data = pd.DataFrame(read_codes(args.data), columns=columns)
    np.random.seed(args.seed)  # its selection and sampling draw from np.random
    widest = max(sizes.values())
    public = pd.DataFrame({c: [i % sizes[c] for i in range(widest)] for c in columns})
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in columns])
    transformer.fit(public)
    if transformer.cardinality != [sizes[c] for c in columns]:
        raise SystemExit(f"transformer cardinality {transformer.cardinality} is not the domain's")
    synth = Synthesizer.create("mst", epsilon=args.epsilon, delta=args.delta)
    synth.fit(data, transformer=transformer, preprocessor_eps=0.0)
    sample = synth.sample(args.rows)
    codes = np.asarray(pd.DataFrame(sample).to_numpy(), dtype=np.int64)
    write_codes(args.out, columns, codes)
    report(version=f"smartnoise-synth {version('smartnoise-synth')} (mbi {version('mbi')})",
           noise="float (OpenDP float Gaussian; np.random selection)",
           budget=f"(ε, δ) = ({args.epsilon}, {args.delta:g}) → its ρ = {cdp_rho(args.epsilon, args.delta):.6g}")


if __name__ == "__main__":
    main()
