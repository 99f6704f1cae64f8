/* chi2.h - the two-sample chi-square test of homogeneity the speculative
 * decoding tests use to check that sampled output keeps its distribution. */
#ifndef NTX_TEST_CHI2_H
#define NTX_TEST_CHI2_H

#include <math.h>

/* Two-sample chi-square homogeneity of counts x and y over n categories;
 * returns the statistic and degrees of freedom after pooling. */
static inline double chi2(const int *x, const int *y, int n, int *df)
{
	double sx = 0, sy = 0, stat = 0, px = 0, py = 0;
	int i, cats = 0;

	for (i = 0; i < n; i++) {
		sx += x[i];
		sy += y[i];
	}
	for (i = 0; i < n; i++) {
		double tot = x[i] + y[i];

		if (tot * sx / (sx + sy) < 10 || tot * sy / (sx + sy) < 10) {
			px += x[i];
			py += y[i];
			continue;
		}
		{
			double ex = tot * sx / (sx + sy), ey = tot * sy / (sx + sy);

			stat += (x[i] - ex) * (x[i] - ex) / ex + (y[i] - ey) * (y[i] - ey) / ey;
			cats++;
		}
	}
	if (px + py > 0) {
		double tot = px + py, ex = tot * sx / (sx + sy), ey = tot * sy / (sx + sy);

		stat += (px - ex) * (px - ex) / ex + (py - ey) * (py - ey) / ey;
		cats++;
	}
	*df = cats - 1;
	return stat;
}

/* Upper tail of the chi-square distribution (Wilson-Hilferty). */
static inline double chi2_p(double x, int df)
{
	double k = df, z;

	if (df < 1)
		return 1;
	z = (pow(x / k, 1.0 / 3) - (1 - 2 / (9 * k))) / sqrt(2 / (9 * k));
	return 0.5 * erfc(z / sqrt(2));
}

#endif
