"""Re-fit the laptop preset's first reference result (evaluated on the first 1,024 validation
windows, checked in under first-1024-windows/) from its tables with the current analysis.

The per-seed nll_l2r / nll_anyorder values are in tables/plateau.csv, core parameters in
tables/gap.csv, family parameters in tables/matched_family_gap.csv (AR's family count is not in
the tables: its core count stands in). Tokens = 8 per core parameter (the preset); FLOPs are
6*N*D, an approximation (the records' flops column is not in the tables).

    PYTHONPATH=. python docs/results/laptop/reanalyse.py

It prints the re-fit and writes the tables reanalysis.md quotes: tables/reanalysis_first_1024.csv
(the re-fit's parameters, gap trends per decade and across the measured span, and multipliers) and
tables/trend_span.csv (the whole-split report's trends across its measured span: the slope per decade
in fits.json times span_decades, as the report prints them).
"""
import json
from pathlib import Path

import polars as pl

from analysis import fit_curves
from analysis.report import summary
from analysis.records.read import Inputs, validate

d='docs/results/laptop/first-1024-windows/tables/'
p=pl.read_csv(d+'plateau.csv')
x=pl.read_csv(d+'gap.csv').select('size','x').unique()
fam=pl.read_csv(d+'matched_family_gap.csv').select('family','size',pl.col('x').alias('xf')).unique()
r=p.join(x,on='size').join(fam,on=['family','size'],how='left')
r=r.with_columns(pl.col('x').cast(pl.Int64).alias('n_params'), pl.col('xf').fill_null(pl.col('x')).cast(pl.Int64).alias('n_params_family'))
r=r.with_columns((8*pl.col('n_params')).alias('tokens')).with_columns((6.0*pl.col('n_params')*pl.col('tokens')).alias('flops'))
r=r.select(pl.lit('laptop').alias('study'),'run_id','family','variant','size','n_params','n_params_family','tokens','flops','seed',pl.lit(1).alias('step'),'dataset','split','metric','value',pl.lit(None,dtype=pl.Float64).alias('se'),pl.lit(1024).alias('n_samples'),pl.lit(None,dtype=pl.Int64).alias('m'),pl.lit('nats/byte').alias('unit'))
rec=validate(r,'recovered')
a=fit_curves.analyse(Inputs(rec,None,('docs/results/laptop/first-1024-windows/tables/plateau.csv',)),bootstrap=1000,seed=0)
s=summary.build_summary(a)
for t in s.answer: print('-',t)
for w in s.warnings: print('W',w)
for f in a.fits: print(f.labels['family'],f.labels['metric'],f.status,f.form,{k:(round(v.value,4),v.ci95) for k,v in f.params.items()},f.diagnostics.get('df_resid'),f.diagnostics.get('lack_of_fit'),f.diagnostics.get('e_test'))
for g in a.gaps:
    print(g.family,g.metric,'trend',round(g.trend.slope,3),round(g.trend.lo,3),round(g.trend.hi,3),g.trend.df)
    for m in g.multipliers:
        if m.x==max(mm.x for mm in g.multipliers if mm.axis==m.axis): print('  k',m.axis,m.x,round(m.k,2),round(m.lo,2),m.hi,m.x_family,m.extrapolated)

HERE = Path(__file__).resolve().parent
COLUMNS = ("quantity", "family", "variant", "metric", "param", "axis", "x", "value", "lo", "hi", "status", "df")


def _row(**kw):
    return {c: kw.get(c) for c in COLUMNS}


def _trend_rows(family, variant, metric, quantity, slope, lo, hi, span, status, df):
    """The trend per decade and across the measured span (the slope times span_decades)."""
    return [_row(quantity=f"{quantity}_per_decade", family=family, variant=variant, metric=metric, value=slope, lo=lo,
                 hi=hi, status=status, df=df),
            _row(quantity=f"{quantity}_across_span", family=family, variant=variant, metric=metric, x=span,
                 value=slope * span, lo=lo * span, hi=hi * span, status=status, df=df)]


rows = []
for f in a.fits:
    for name, p in f.params.items():
        lo, hi = p.ci95
        rows.append(_row(quantity="fit", family=f.labels['family'], variant=f.labels.get('variant'),
                         metric=f.labels['metric'], param=name, value=p.value, lo=lo, hi=hi, status=f.status,
                         df=f.diagnostics.get('df_resid')))
for g in a.gaps:
    t = g.trend
    rows += _trend_rows(g.family, g.variant, g.metric, "gap_trend", t.slope, t.lo, t.hi, t.span_decades, t.status, t.df)
    for m in g.multipliers:
        rows.append(_row(quantity="multiplier", family=g.family, variant=g.variant, metric=g.metric, axis=m.axis, x=m.x,
                         value=m.k, lo=m.lo, hi=m.hi, status="extrapolated" if m.extrapolated else "interpolated"))
schema = {c: (pl.Float64 if c in ("x", "value", "lo", "hi") else pl.Int64 if c == "df" else pl.Utf8) for c in COLUMNS}
pl.DataFrame(rows, schema=schema).write_csv(HERE / "tables" / "reanalysis_first_1024.csv")

whole = json.loads((HERE / "fits.json").read_text())  # the whole-split report beside this script
spans = []
for g in whole["gaps"]:
    t = g["trend"]
    spans += _trend_rows(g["family"], g["variant"], g["metric"], "gap_trend", t["slope_per_decade"], *t["ci95"],
                         t["span_decades"], t["status"], t["df"])
for e in whole.get("ensemble", []):
    t = e["gain_trend"]
    spans += _trend_rows(e["family"], e["variant"], "nll_ensemble", "ensemble_gain_trend", t["slope_per_decade"],
                         *t["ci95"], t["span_decades"], t["status"], t["df"])
pl.DataFrame(spans, schema=schema).write_csv(HERE / "tables" / "trend_span.csv")
