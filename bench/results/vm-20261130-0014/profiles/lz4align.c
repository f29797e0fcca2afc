/* Why is LZ4 slower inside the library path? Same batches, variants of
 * where src/dst live. */
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static uint32_t le32(const uint8_t*p){return p[0]|p[1]<<8|p[2]<<16|(uint32_t)p[3]<<24;}
int main(int argc,char**argv){
	int fd=open(argv[1],O_RDONLY); struct stat sb; fstat(fd,&sb); uint8_t*d=malloc(sb.st_size); size_t got=0; while(got<(size_t)sb.st_size){ssize_t r=read(fd,d+got,sb.st_size-got); if(r<=0)return 1; got+=r;}
	enum{MAXB=8192}; static const uint8_t*bp[MAXB]; static size_t bl[MAXB]; size_t nb=0;
	for(size_t off=0;off+48<=(size_t)sb.st_size&&nb<MAXB;){uint32_t pl=le32(d+off+36); bp[nb]=d+off+48; bl[nb++]=pl; off+=48+pl;}
	void*st=malloc(LZ4_sizeofState());
	uint8_t*pool; posix_memalign((void**)&pool,4096,(size_t)2048*65536);
	memset(pool,1,(size_t)2048*65536);
	uint8_t*mdst=malloc(70000);
	const char*names[]={"A direct src -> malloc dst","B memcpy to pool buf(+48), dst pool(+48), 1 buffer each","C as B, dst offset +48+1088","D direct src -> pool dst(+48)","E as B rotating 1024 src + 1024 dst buffers","F as E, dst offset +1136"};
	for(int rep=0;rep<2;rep++){
	for(int q=1;q<=32;q*=2){
		/* G: fill q buffers, then compress the q (the writer's deferred
		 * framing does this with q = 16). */
		double t0=now(); size_t bytes=0; unsigned k=0;
		for(int pass=0;pass<2;pass++) for(size_t i=0;i+q<=nb;i+=q){
			for(int j=0;j<q;j++) memcpy(pool+(size_t)65536*((k+j)%1024)+48,bp[i+j],bl[i+j]);
			for(int j=0;j<q;j++){
				int r=LZ4_compress_fast_extState(st,(const char*)pool+(size_t)65536*((k+j)%1024)+48,(char*)pool+(size_t)65536*(1024+(k+j)%1024)+48,(int)bl[i+j],(int)bl[i+j]-1,1);
				if(r<=0) return 2; bytes+=bl[i+j];
			}
			k+=q;
		}
		printf("G fill %2d buffers, then compress them                         %6.0f MiB/s\n",q,bytes/(now()-t0)/1048576);
	}
	for(int v=0;v<6;v++){
		double t0=now(); size_t bytes=0; unsigned k=0;
		for(int pass=0;pass<2;pass++) for(size_t i=0;i<nb;i++,k++){
			const uint8_t*src=bp[i]; uint8_t*dst=mdst; size_t n=bl[i];
			uint8_t*sbuf=pool+48, *dbuf=pool+65536*1024+48;
			if(v>=4){sbuf=pool+(size_t)65536*(k%1024)+48; dbuf=pool+(size_t)65536*(1024+(k*7)%1024)+48;}
			if(v==1||v==2||v>=4){memcpy(sbuf,src,n); src=sbuf;}
			if(v==1||v==3||v==4) dst=dbuf; else if(v==2||v==5) dst=dbuf+1088;
			int r=LZ4_compress_fast_extState(st,(const char*)src,(char*)dst,(int)n,(int)n-1,1);
			if(r<=0) return 2; bytes+=n;
		}
		printf("%-60s %6.0f MiB/s\n",names[v],bytes/(now()-t0)/1048576);
	}}
}
