"""Re-fit the laptop preset's first reference result (evaluated on the first 1,024 validation
windows, checked in under first-1024-windows/) from its tables with the current analysis.

The per-seed nll_l2r / nll_anyorder values are in tables/plateau.csv, core parameters in
tables/gap.csv, family parameters in tables/matched_family_gap.csv (AR's family count is not in
the tables: its core count stands in). Tokens = 8 per core parameter (the preset); FLOPs are
6*N*D, an approximation (the records' flops column is not in the tables).

    PYTHONPATH=. python docs/results/laptop/reanalyse.py
"""
import polars as pl

from analysis import fit_curves, summary
from analysis.records import Inputs, validate

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
