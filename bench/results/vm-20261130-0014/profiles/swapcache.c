/* Experiment: is swap's 64 vs 256 KiB difference the swap, or the cache
 * state the untimed fill leaves behind? rdtsc per queue-only call. */
#include <ushuffle/ushuffle.h>
#include <x86intrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b){uint64_t x=*(const uint64_t*)a,y=*(const uint64_t*)b;return x<y?-1:x>y;}
int main(void){
	static uint8_t junk[1<<20];
	size_t sizes[2]={64<<10,256<<10}, fills[3]={0,64<<10,256<<10};
	for(int si=0;si<2;si++)for(int fi=0;fi<3;fi++){
		struct ush_ring_opts ro; ush_ring_opts_init(&ro); ro.push_size=sizes[si]; ro.codec=USH_CODEC_NONE; ro.fixedbufs=0; ro.pool_bytes=32*sizes[si]>(64<<20)?32*sizes[si]:(64<<20);
		ush_ring *r; if(ush_ring_create(&r,&ro)) return 1;
		struct ush_writer_opts wo={.shuffle=1,.partitions=16,.target=USH_TARGET_NULL};
		ush_writer *w; if(ush_writer_open(&w,r,&wo)) return 1;
		void *buf; size_t cap; ush_writer_acquire(w,&buf,&cap);
		enum{N=32768}; static uint64_t v[N]; size_t n=0;
		for(int j=0;j<N+1024;j++){
			if(fills[fi]) memset(junk,j,fills[fi]);
			ush_record_put(buf,junk,100);
			uint64_t t0=__rdtsc();
			ush_writer_swap(w,j%16,&buf,104,1);
			uint64_t t1=__rdtsc();
			if(j>=1024 && (j+1)%16) v[n++]=t1-t0;
		}
		qsort(v,n,8,cmp); double sm=0; size_t m=n*99/100; for(size_t i=0;i<m;i++) sm+=v[i];
		printf("buffer %3zu KiB, untimed fill %3zu KiB: queue-only swap median %4llu cycles p90 %4llu trimmed mean %.1f\n",sizes[si]>>10,fills[fi]>>10,(unsigned long long)v[n/2],(unsigned long long)v[n*9/10], sm/m);
		ush_writer_release(w,buf); ush_writer_commit(w,NULL); ush_writer_free(w); ush_ring_free(r);
	}
}
